#!/usr/bin/env bash
# TPU VM pods: create, copy the code, install, run one command on every worker.
#
#   launch/pod.sh [SETTINGS] create | copy | install | status | logs | attach | stop | delete
#   launch/pod.sh [SETTINGS] run [--detach] [--retries=N] -- python -m recipes.train ...
#
# Settings (flag or environment variable):
#   --tpu_name=NAME          TPU_NAME            the queued resource and its TPU VM (required)
#   --zone=ZONE              ZONE                default: gcloud config get-value compute/zone
#   --project=PROJECT        PROJECT             default: gcloud config get-value project
#   --accelerator_type=TYPE  ACCELERATOR_TYPE    e.g. v4-32, v5litepod-16 (create)
#   --version=RUNTIME        RUNTIME_VERSION     TPU software, e.g. tpu-ubuntu2204-base (create)
#   --spot                   SPOT=1              spot capacity instead of reserved/on-demand
#   --node_count=N           NODE_COUNT          slices, default 1 (more: multislice, TPU VMs NAME-0...)
#   --direct                 DIRECT=1            a TPU VM without a queued resource (tpu-vm create)
#   --workers=N              NUM_WORKERS         hosts per slice (run; default: asked of gcloud)
#   --timeout=SECONDS        POD_TIMEOUT         longest wait for ACTIVE (default 0: no limit)
#   --retries=N              POD_RETRIES         run: after a preemption, create, run again (N times)
#   --detach                                     run: start the command on the workers and return
#   --dry-run                                    print the gcloud commands instead of running them
#                                                (run: its command once, and the workers it goes to)
#   POD_POLL_SECONDS                             seconds between state checks (default 30)
#   GCLOUD                                       the gcloud binary (default: gcloud on PATH)
#
# `create` asks for the slice as a queued resource (Google's recommended way,
# and the only one for multislice; `queued` is another name for it) and waits
# until it is ACTIVE, or says why not; run it again to wait again. `delete`
# deletes the queued resource and its TPU VMs.
#
# `run` starts the command on every worker of every slice with
# RECIPES_DISTRIBUTED=1, which makes recipes/train.py call
# jax.distributed.initialize(): JAX finds the topology itself, and for
# multislice the MEGASCALE_* settings, which Cloud TPU puts in the TPU VMs'
# metadata. Each worker runs the command under setsid nohup, its output in
# ~/jax-model-zoo/logs/run.log there, so neither a closed laptop nor a lost
# connection stops it; when it ends, the worker copies that log to
# WORKDIR/logs/run-HOSTNAME.log if the command has a --workdir.
# Without --detach, `run` follows the workers: each one's output goes to
# logs/TPU_NAME/worker-N.log here (slice-S-worker-N.log for multislice),
# worker 0's is also shown, the exit status names the workers that failed, and
# Ctrl-C leaves the run going. With --retries=N, when the run fails because the
# slice is gone (preempted: no longer ACTIVE), `run` asks for it again (pass
# the settings of `create` too), copies and installs the code, and runs the
# same command again; the recipes resume from the workdir.
#
# `status` shows the slice's state and whether each worker's run goes on,
# `logs` the end of each worker's log, `attach` follows worker 0's log
# (Ctrl-C leaves the run going), `stop` ends the run.
set -uo pipefail

REMOTE_DIR='~/jax-model-zoo'
DRY_RUN=0 DETACH=0
TPU_NAME="${TPU_NAME:-}" ZONE="${ZONE:-}" PROJECT="${PROJECT:-}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-}" RUNTIME_VERSION="${RUNTIME_VERSION:-}"
SPOT="${SPOT:-0}" NUM_WORKERS="${NUM_WORKERS:-}" NODE_COUNT="${NODE_COUNT:-1}"
DIRECT="${DIRECT:-0}" POD_TIMEOUT="${POD_TIMEOUT:-0}" POD_RETRIES="${POD_RETRIES:-0}"
POD_POLL_SECONDS="${POD_POLL_SECONDS:-30}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
GCLOUD="${GCLOUD:-gcloud}"

die() { echo "pod.sh: error: $*" >&2; exit 2; }

# The comment block at the top of this file, without its '#'.
usage() { awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

# Runs (or, with --dry-run, prints) one gcloud command.
gcloud_do() {
  if [ "${DRY_RUN}" = 1 ]; then
    printf 'gcloud'; printf ' %q' "$@"; printf '\n'
  else
    "${GCLOUD}" "$@"
  fi
}

require_gcloud() {
  command -v "${GCLOUD}" >/dev/null 2>&1 || die "gcloud not found: install the Google Cloud SDK (https://cloud.google.com/sdk/docs/install) or use --dry-run"
}

# Project and zone default to the gcloud configuration.
resolve_settings() {
  [ -n "${TPU_NAME}" ] || die "no TPU name: pass --tpu_name=NAME or set TPU_NAME"
  if [ -z "${PROJECT}" ] && command -v "${GCLOUD}" >/dev/null 2>&1; then
    PROJECT="$("${GCLOUD}" config get-value project 2>/dev/null)"
  fi
  if [ -z "${ZONE}" ] && command -v "${GCLOUD}" >/dev/null 2>&1; then
    ZONE="$("${GCLOUD}" config get-value compute/zone 2>/dev/null)"
  fi
  [ -n "${PROJECT}" ] || die "no project: pass --project=PROJECT, set PROJECT or run 'gcloud config set project PROJECT'"
  [ -n "${ZONE}" ] || die "no zone: pass --zone=ZONE, set ZONE or run 'gcloud config set compute/zone ZONE'"
  LOCATION=(--project="${PROJECT}" --zone="${ZONE}")
  if [ "${DIRECT}" = 1 ]; then
    KIND='TPU VM'
    DESCRIBE=(compute tpus tpu-vm describe "${TPU_NAME}" "${LOCATION[@]}" --format='value(state)')
  else
    KIND='queued resource'
    DESCRIBE=(compute tpus queued-resources describe "${TPU_NAME}" "${LOCATION[@]}" --format='value(state.state)')
  fi
}

# Bad numbers are one clear line here rather than a bash error later.
check_numbers() {
  [[ "${NODE_COUNT}" =~ ^[1-9][0-9]*$ ]] || die "--node_count must be a number of slices, 1 or more; got '${NODE_COUNT}'"
  [ -z "${NUM_WORKERS}" ] || [[ "${NUM_WORKERS}" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a number of hosts, 1 or more; got '${NUM_WORKERS}'"
  [[ "${POD_RETRIES}" =~ ^[0-9]+$ ]] || die "--retries must be a whole number, 0 or more; got '${POD_RETRIES}'"
  [[ "${POD_TIMEOUT}" =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds (0: no limit); got '${POD_TIMEOUT}'"
  [[ "${POD_POLL_SECONDS}" =~ ^[0-9]*\.?[0-9]+$ ]] || die "POD_POLL_SECONDS must be a number of seconds; got '${POD_POLL_SECONDS}'"
  if [ "${DIRECT}" = 1 ] && [ "${NODE_COUNT}" -gt 1 ]; then
    die "multislice (--node_count over 1) needs a queued resource: drop --direct"
  fi
  if [ "${DETACH}" = 1 ] && [ "${POD_RETRIES}" -gt 0 ]; then
    die "--retries needs pod.sh to follow the run: drop --detach (Ctrl-C still leaves the run going)"
  fi
}

need() {  # need VALUE FLAG VARIABLE
  [ -n "$1" ] || die "$2 needed: pass $2=... or set $3"
}

spot_flag() { [ "${SPOT}" = 1 ] && echo --spot; }

# The slice's TPU VMs: NAME, or for multislice NAME-0 ... NAME-<N-1>, the
# names Cloud TPU gives the nodes of --node-prefix=NAME.
nodes() {
  local i
  if [ "${NODE_COUNT}" -gt 1 ]; then
    for ((i = 0; i < NODE_COUNT; i++)); do echo "${TPU_NAME}-${i}"; done
  else
    echo "${TPU_NAME}"
  fi
}

ssh_all() {  # ssh_all COMMAND: the same shell command on every worker of every slice
  local node failed=0
  for node in $(nodes); do
    gcloud_do compute tpus tpu-vm ssh "${node}" "${LOCATION[@]}" --worker=all --command="$1" || failed=1
  done
  return "${failed}"
}

# ACTIVE (READY with --direct) when the TPU VMs are up; empty when there is
# no such slice.
slice_state() { "${GCLOUD}" "${DESCRIBE[@]}" 2>/dev/null; }

# States that lead to ACTIVE (READY) by themselves.
waiting_state() {
  case "$1" in
    WAITING_FOR_RESOURCES|ACCEPTED|CREATING|PROVISIONING|STARTING|RESTARTING|REPAIRING) return 0 ;;
    *) return 1 ;;
  esac
}

wait_until_up() {
  if [ "${DRY_RUN}" = 1 ]; then gcloud_do "${DESCRIBE[@]}"; return 0; fi
  local start="${SECONDS}" state shown=""
  while true; do
    state="$(slice_state)"
    case "${state}" in
      ACTIVE|READY) echo "pod.sh: ${KIND} ${TPU_NAME} is ${state}"; return 0 ;;
      "") die "no ${KIND} ${TPU_NAME} in ${ZONE} (or gcloud cannot read it): pod.sh create asks for it" ;;
    esac
    waiting_state "${state}" || die "${KIND} ${TPU_NAME} is ${state}, it will not come up: see 'gcloud ${DESCRIBE[*]:0:4} ${TPU_NAME}', then pod.sh delete and pod.sh create to ask again (another zone, or spot capacity, may have room)"
    [ "${state}" = "${shown}" ] || echo "pod.sh: ${KIND} ${TPU_NAME} is ${state}; waiting"
    shown="${state}"
    if [ "${POD_TIMEOUT}" -gt 0 ] && [ $((SECONDS - start)) -ge "${POD_TIMEOUT}" ]; then
      die "${KIND} ${TPU_NAME} still ${state} after ${POD_TIMEOUT} s; the request stays queued: pod.sh create waits again, pod.sh delete withdraws it"
    fi
    sleep "${POD_POLL_SECONDS}"
  done
}

request_slice() {
  if [ "${DIRECT}" = 1 ]; then
    gcloud_do compute tpus tpu-vm create "${TPU_NAME}" "${LOCATION[@]}" \
      --accelerator-type="${ACCELERATOR_TYPE}" --version="${RUNTIME_VERSION}" $(spot_flag)
    return
  fi
  local node_flags=(--node-id="${TPU_NAME}")
  if [ "${NODE_COUNT}" -gt 1 ]; then
    node_flags=(--node-count="${NODE_COUNT}" --node-prefix="${TPU_NAME}")
  fi
  gcloud_do compute tpus queued-resources create "${TPU_NAME}" "${LOCATION[@]}" \
    "${node_flags[@]}" --accelerator-type="${ACCELERATOR_TYPE}" \
    --runtime-version="${RUNTIME_VERSION}" $(spot_flag)
}

cmd_create() {
  need "${ACCELERATOR_TYPE}" --accelerator_type ACCELERATOR_TYPE
  need "${RUNTIME_VERSION}" --version RUNTIME_VERSION
  # One asked for before (say, create stopped while it waited) is waited for.
  if [ "${DRY_RUN}" = 1 ] || [ -z "$(slice_state)" ]; then
    request_slice || exit 1
  fi
  wait_until_up
}

cmd_delete() {
  if [ "${DIRECT}" = 1 ]; then
    gcloud_do compute tpus tpu-vm delete "${TPU_NAME}" "${LOCATION[@]}" --quiet
  else
    # --force deletes the TPU VMs first, whatever the request's state.
    gcloud_do compute tpus queued-resources delete "${TPU_NAME}" "${LOCATION[@]}" --force --quiet
  fi
}

cmd_copy() {
  local archive="${TMPDIR:-/tmp}/jax-model-zoo-${TPU_NAME}.tar.gz" node
  # The code only: no git history, virtual environments, workdirs or logs.
  local tar_cmd=(tar -czf "${archive}" -C "${ROOT}" --exclude=.git --exclude='.venv*'
    --exclude='venv*' --exclude='.ci-venv*' --exclude='workdir*' --exclude=logs
    --exclude='__pycache__' --exclude='*.egg-info' .)
  if [ "${DRY_RUN}" = 1 ]; then printf '%q ' "${tar_cmd[@]}"; printf '\n'; else "${tar_cmd[@]}" || exit 1; fi
  for node in $(nodes); do
    gcloud_do compute tpus tpu-vm scp "${archive}" "${node}:jax-model-zoo.tar.gz" \
      "${LOCATION[@]}" --worker=all || exit 1
  done
  [ "${DRY_RUN}" = 1 ] || rm -f "${archive}"
  ssh_all "mkdir -p ${REMOTE_DIR} && tar -xzf jax-model-zoo.tar.gz -C ${REMOTE_DIR}"
}

cmd_install() {
  # Idempotent: reuses the virtual environment, pip skips what is installed.
  ssh_all "cd ${REMOTE_DIR} && { [ -d .venv ] || python3 -m venv .venv; } && .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[tpu]'"
}

count_workers() {
  if [ -n "${NUM_WORKERS}" ]; then echo "${NUM_WORKERS}"; return; fi
  [ "${DRY_RUN}" = 1 ] && die "--workers=N needed with --dry-run (otherwise asked of gcloud)"
  local node count
  node="$(nodes | head -n 1)"
  count="$("${GCLOUD}" compute tpus tpu-vm describe "${node}" "${LOCATION[@]}" \
    --format='value(networkEndpoints.len())' 2>/dev/null)"
  [[ "${count}" =~ ^[1-9][0-9]*$ ]] || die "cannot count the workers of ${node} (pod.sh status shows whether it is up): pass --workers=N"
  echo "${count}"
}

squote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }  # one word for the remote shell

# What each worker runs to start COMMAND in a session of its own: a second
# run while one goes on is refused; the command's status ends in
# logs/run.status, its output in logs/run.log (then copied to the workdir).
start_script() {  # start_script COMMAND...
  local arg previous="" workdir="" copy_log=":"
  for arg in "$@"; do
    [ "${previous}" = --workdir ] && workdir="${arg}"
    case "${arg}" in --workdir=*) workdir="${arg#*=}" ;; esac
    previous="${arg}"
  done
  if [ -n "${workdir}" ]; then
    local logs; logs="$(printf %q "${workdir%/}/logs")"
    case "${workdir}" in
      gs://*) copy_log="gcloud storage cp logs/run.log ${logs}/run-\$(hostname).log" ;;
      *) copy_log="mkdir -p ${logs} && cp logs/run.log ${logs}/run-\$(hostname).log" ;;
    esac
  fi
  local inner=". .venv/bin/activate && export RECIPES_DISTRIBUTED=1 && $(printf '%q ' "$@"); status=\$?; ${copy_log}; echo \${status} > logs/run.status; exit \${status}"
  echo "cd ${REMOTE_DIR} && mkdir -p logs && if [ -f logs/run.pid ] && kill -0 \"\$(cat logs/run.pid)\" 2>/dev/null; then echo \"pod.sh: a run still goes on on \$(hostname) (pod.sh stop ends it)\" >&2; exit 3; fi && rm -f logs/run.status && { setsid nohup bash -c $(squote "${inner}") > logs/run.log 2>&1 < /dev/null & echo \$! > logs/run.pid; }"
}

# Shows the run's log until it ends, then exits with its status.
FOLLOW='tail -n +1 --pid="$(cat logs/run.pid)" -F logs/run.log 2>/dev/null; exit "$(cat logs/run.status 2>/dev/null || echo 1)"'
STATUS="cd ${REMOTE_DIR} 2>/dev/null || { echo \"\$(hostname): no code (pod.sh copy)\"; exit 0; }; "'if [ -f logs/run.pid ] && kill -0 "$(cat logs/run.pid)" 2>/dev/null; then echo "$(hostname): running"; elif [ -f logs/run.status ]; then echo "$(hostname): finished, exit status $(cat logs/run.status)"; elif [ -f logs/run.pid ]; then echo "$(hostname): stopped"; else echo "$(hostname): no run"; fi'
LOGS="cd ${REMOTE_DIR} 2>/dev/null && [ -f logs/run.log ] && tail -n 50 logs/run.log | sed \"s/^/\$(hostname): /\" || echo \"\$(hostname): no log (no run yet)\""
ATTACH="cd ${REMOTE_DIR} && [ -f logs/run.pid ] || { echo \"pod.sh: no run on \$(hostname)\" >&2; exit 1; }; "'tail -n 50 --pid="$(cat logs/run.pid)" -F logs/run.log 2>/dev/null; echo "pod.sh: the run ended, exit status $(cat logs/run.status 2>/dev/null || echo unknown: stopped)"'

# --dry-run's view of a run: the ssh command once, the workers it goes to
# (what differs from one to the next), and the command each worker's shell
# runs, as that shell reads it; not one shell-escaped line per worker.
show_run() {  # show_run WORKERS COMMAND (WORKERS: hosts per slice, or all)
  local vm="${TPU_NAME}" vms="TPU VM ${TPU_NAME}" log="worker-N" each="" worker=N
  if [ "${NODE_COUNT}" -gt 1 ]; then
    vm="${TPU_NAME}-S" vms="TPU VMs ${TPU_NAME}-S, S = 0 to $((NODE_COUNT - 1))"
    log="slice-S-worker-N" each=" on each"
  fi
  if [ "$1" = all ]; then
    worker=all
    echo "pod.sh: dry run: the command below starts the run on every worker (${vms}, --worker=all) and returns:"
  else
    echo "pod.sh: dry run: the command below runs on $(($1 * NODE_COUNT)) workers (${vms}, --worker=N, N = 0 to $(($1 - 1))${each}), each one's output to logs/${TPU_NAME}/${log}.log here:"
  fi
  echo "gcloud compute tpus tpu-vm ssh ${vm} ${LOCATION[*]} --worker=${worker} --command=\"\$COMMAND\""
  echo "COMMAND, the same on every worker:"
  echo "$2"
}

# Runs COMMAND on every worker and follows them to the end: 0 when every
# worker's command succeeded.
run_attached() {  # run_attached WORKERS COMMAND...
  local workers="$1"; shift
  local remote; remote="$(start_script "$@") && ${FOLLOW}"
  if [ "${DRY_RUN}" = 1 ]; then show_run "${workers}" "${remote}"; return 0; fi
  local log_dir="${ROOT}/logs/${TPU_NAME}" node slice=0 i name
  local pids=() names=() failed=()
  mkdir -p "${log_dir}"
  for node in $(nodes); do
    for ((i = 0; i < workers; i++)); do
      name="worker-${i}"
      [ "${NODE_COUNT}" -gt 1 ] && name="slice-${slice}-worker-${i}"
      if [ "${#pids[@]}" = 0 ]; then  # Worker 0's output is also shown.
        "${GCLOUD}" compute tpus tpu-vm ssh "${node}" "${LOCATION[@]}" --worker="${i}" \
          --command="${remote}" 2>&1 | tee "${log_dir}/${name}.log" &
      else
        "${GCLOUD}" compute tpus tpu-vm ssh "${node}" "${LOCATION[@]}" --worker="${i}" \
          --command="${remote}" >"${log_dir}/${name}.log" 2>&1 &
      fi
      pids+=($!) names+=("${name}")
    done
    slice=$((slice + 1))
  done
  trap 'kill "${pids[@]}" 2>/dev/null; echo "pod.sh: the run goes on on the workers: pod.sh attach follows it, pod.sh stop ends it" >&2; exit 130' INT
  for ((i = 0; i < ${#pids[@]}; i++)); do
    wait "${pids[$i]}" || failed+=("${names[$i]}")
  done
  trap - INT
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "pod.sh: workers failed: ${failed[*]} (logs in ${log_dir})" >&2
    return 1
  fi
  echo "pod.sh: all ${#pids[@]} workers finished (logs in ${log_dir})"
}

# After a preemption: a request Cloud TPU is already provisioning again is
# waited for; one SUSPENDED or FAILED never comes back, so it is deleted and
# asked for again. Then the code goes to the new TPU VMs.
recreate() {  # recreate STATE
  if ! waiting_state "$1"; then
    if [ -n "$1" ]; then cmd_delete >/dev/null 2>&1; fi
    request_slice || exit 1
  fi
  wait_until_up && cmd_copy && cmd_install
}

cmd_run() {
  [ "$#" -gt 0 ] || die "run needs a command: pod.sh run -- python -m recipes.train ..."
  if [ "${DETACH}" = 1 ]; then
    if [ "${DRY_RUN}" = 1 ]; then show_run all "$(start_script "$@")"; return 0; fi
    ssh_all "$(start_script "$@")" || { echo "pod.sh: error: the run did not start on every worker (see above; pod.sh status)" >&2; exit 1; }
    echo "pod.sh: started on every worker of ${TPU_NAME}, without this terminal: pod.sh status, logs and attach follow it, pod.sh stop ends it"
    return 0
  fi
  if [ "${POD_RETRIES}" -gt 0 ]; then  # A retry asks for the slice again.
    need "${ACCELERATOR_TYPE}" --accelerator_type ACCELERATOR_TYPE
    need "${RUNTIME_VERSION}" --version RUNTIME_VERSION
  fi
  local workers; workers="$(count_workers)" || exit 2
  local retry=0 state
  while true; do
    run_attached "${workers}" "$@" && return 0
    # The command failed on a slice that is up: not a preemption.
    state="$(slice_state)"
    case "${state}" in ACTIVE|READY) return 1 ;; esac
    if [ "${retry}" -ge "${POD_RETRIES}" ]; then
      echo "pod.sh: error: ${KIND} ${TPU_NAME} is ${state:-gone} (preempted) and no retries are left: pod.sh run --retries=N asks for it again and runs again" >&2
      return 1
    fi
    retry=$((retry + 1))
    echo "pod.sh: retry ${retry} of ${POD_RETRIES}: ${KIND} ${TPU_NAME} is ${state:-gone} (preempted); asking for it again, then copy, install and the same command"
    recreate "${state}" || return 1
  done
}

cmd_status() {
  if [ "${DRY_RUN}" = 1 ]; then gcloud_do "${DESCRIBE[@]}"; ssh_all "${STATUS}"; return; fi
  local state; state="$(slice_state)"
  echo "pod.sh: ${KIND} ${TPU_NAME}: ${state:-not found}"
  case "${state}" in ACTIVE|READY) ssh_all "${STATUS}" ;; esac
}

cmd_logs() { ssh_all "${LOGS}"; }

cmd_attach() {
  local node; node="$(nodes | head -n 1)"
  [ "${DRY_RUN}" = 1 ] || echo "pod.sh: following worker 0 of ${node}; Ctrl-C stops following, not the run" >&2
  gcloud_do compute tpus tpu-vm ssh "${node}" "${LOCATION[@]}" --worker=0 --command="${ATTACH}"
}

cmd_stop() {
  # The run's session, our processes, then stale holders of the TPU and
  # libtpu's lock file.
  ssh_all "cd ${REMOTE_DIR} 2>/dev/null && [ -f logs/run.pid ] && kill -- -\"\$(cat logs/run.pid)\" 2>/dev/null; pkill -f 'recipes\\.' ; sudo fuser -k /dev/accel* /dev/vfio/* 2>/dev/null; sudo rm -f /tmp/libtpu_lockfile; true"
}

main() {
  local subcommand=""
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      --tpu_name=*) TPU_NAME="${1#*=}" ;;
      --zone=*) ZONE="${1#*=}" ;;
      --project=*) PROJECT="${1#*=}" ;;
      --accelerator_type=*) ACCELERATOR_TYPE="${1#*=}" ;;
      --version=*) RUNTIME_VERSION="${1#*=}" ;;
      --workers=*) NUM_WORKERS="${1#*=}" ;;
      --node_count=*|--node-count=*) NODE_COUNT="${1#*=}" ;;
      --timeout=*) POD_TIMEOUT="${1#*=}" ;;
      --retries=*) POD_RETRIES="${1#*=}" ;;
      --spot) SPOT=1 ;;
      --direct) DIRECT=1 ;;
      --detach) DETACH=1 ;;
      -h|--help) usage; exit 0 ;;
      --) shift; break ;;
      --tpu_name|--zone|--project|--accelerator_type|--version|--workers|--node_count|--node-count|--timeout|--retries)
        die "$1 needs a value: $1=..." ;;
      -*) die "unknown option $1 (see --help)" ;;
      *) [ -z "${subcommand}" ] || die "one subcommand at a time: got ${subcommand} and $1"
         subcommand="$1" ;;
    esac
    shift
  done
  case "${subcommand}" in
    queued) subcommand=create DIRECT=0 ;;
    create|copy|install|run|status|logs|attach|stop|delete) ;;
    "") usage >&2; die "no subcommand given" ;;
    *) die "unknown subcommand ${subcommand} (see --help)" ;;
  esac
  check_numbers
  [ "${DRY_RUN}" = 1 ] || require_gcloud
  resolve_settings
  "cmd_${subcommand}" "$@"
}

main "$@"
