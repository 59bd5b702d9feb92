#!/usr/bin/env bash
# TPU VM pods: create, copy the code, install, run one command on every worker.
#
#   launch/pod.sh [SETTINGS] create | queued | copy | install | logs | stop | delete
#   launch/pod.sh [SETTINGS] run -- python -m recipes.train --config=... --workdir=gs://...
#
# Settings (flag or environment variable):
#   --tpu_name=NAME          TPU_NAME            the TPU VM (required)
#   --zone=ZONE              ZONE                default: gcloud config get-value compute/zone
#   --project=PROJECT        PROJECT             default: gcloud config get-value project
#   --accelerator_type=TYPE  ACCELERATOR_TYPE    e.g. v4-32, v5litepod-16 (create, queued)
#   --version=RUNTIME        RUNTIME_VERSION     TPU software, e.g. tpu-ubuntu2204-base
#   --spot                   SPOT=1              spot capacity instead of reserved/on-demand
#   --workers=N              NUM_WORKERS         hosts in the slice (run; default: asked of gcloud)
#   --dry-run                                    print every gcloud command instead of running it
#   GCLOUD                                       the gcloud binary (default: gcloud on PATH)
#
# `run` starts the command on all workers at once with RECIPES_DISTRIBUTED=1,
# which makes recipes/train.py call jax.distributed.initialize() (JAX finds
# the pod's topology itself). Each worker's output goes to
# logs/TPU_NAME/worker-N.log here, worker 0's is also shown; the exit status
# names the workers that failed.
set -uo pipefail

REMOTE_DIR='~/jax-model-zoo'
DRY_RUN=0
TPU_NAME="${TPU_NAME:-}" ZONE="${ZONE:-}" PROJECT="${PROJECT:-}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-}" RUNTIME_VERSION="${RUNTIME_VERSION:-}"
SPOT="${SPOT:-0}" NUM_WORKERS="${NUM_WORKERS:-}"
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
}

need() {  # need VALUE FLAG VARIABLE
  [ -n "$1" ] || die "$2 needed: pass $2=... or set $3"
}

spot_flag() { [ "${SPOT}" = 1 ] && echo --spot; }

ssh_all() {  # ssh_all COMMAND: the same shell command on every worker
  gcloud_do compute tpus tpu-vm ssh "${TPU_NAME}" "${LOCATION[@]}" --worker=all --command="$1"
}

cmd_create() {
  need "${ACCELERATOR_TYPE}" --accelerator_type ACCELERATOR_TYPE
  need "${RUNTIME_VERSION}" --version RUNTIME_VERSION
  gcloud_do compute tpus tpu-vm create "${TPU_NAME}" "${LOCATION[@]}" \
    --accelerator-type="${ACCELERATOR_TYPE}" --version="${RUNTIME_VERSION}" $(spot_flag)
}

cmd_queued() {
  need "${ACCELERATOR_TYPE}" --accelerator_type ACCELERATOR_TYPE
  need "${RUNTIME_VERSION}" --version RUNTIME_VERSION
  gcloud_do compute tpus queued-resources create "${TPU_NAME}" "${LOCATION[@]}" \
    --node-id="${TPU_NAME}" --accelerator-type="${ACCELERATOR_TYPE}" \
    --runtime-version="${RUNTIME_VERSION}" $(spot_flag)
}

cmd_copy() {
  local archive="/tmp/jax-model-zoo-${TPU_NAME}.tar.gz"
  # The code only: no git history, virtual environments, workdirs or logs.
  local tar_cmd=(tar -czf "${archive}" -C "${ROOT}" --exclude=.git --exclude='.venv*'
    --exclude='venv*' --exclude='.ci-venv*' --exclude='workdir*' --exclude=logs
    --exclude='__pycache__' --exclude='*.egg-info' .)
  if [ "${DRY_RUN}" = 1 ]; then printf '%q ' "${tar_cmd[@]}"; printf '\n'; else "${tar_cmd[@]}" || exit 1; fi
  gcloud_do compute tpus tpu-vm scp "${archive}" "${TPU_NAME}:jax-model-zoo.tar.gz" \
    "${LOCATION[@]}" --worker=all
  ssh_all "mkdir -p ${REMOTE_DIR} && tar -xzf jax-model-zoo.tar.gz -C ${REMOTE_DIR}"
}

cmd_install() {
  # Idempotent: reuses the virtual environment, pip skips what is installed.
  ssh_all "cd ${REMOTE_DIR} && { [ -d .venv ] || python3 -m venv .venv; } && .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[tpu]'"
}

count_workers() {
  if [ -n "${NUM_WORKERS}" ]; then echo "${NUM_WORKERS}"; return; fi
  [ "${DRY_RUN}" = 1 ] && die "--workers=N needed with --dry-run (otherwise asked of gcloud)"
  "${GCLOUD}" compute tpus tpu-vm describe "${TPU_NAME}" "${LOCATION[@]}" \
    --format='value(networkEndpoints.len())'
}

cmd_run() {
  [ "$#" -gt 0 ] || die "run needs a command: pod.sh run -- python -m recipes.train ..."
  local workers; workers="$(count_workers)" || exit 2
  local log_dir="${ROOT}/logs/${TPU_NAME}"
  local remote="cd ${REMOTE_DIR} && . .venv/bin/activate && export RECIPES_DISTRIBUTED=1 && $(printf '%q ' "$@")"
  local pids=() i
  if [ "${DRY_RUN}" = 1 ]; then
    for ((i = 0; i < workers; i++)); do
      gcloud_do compute tpus tpu-vm ssh "${TPU_NAME}" "${LOCATION[@]}" --worker="${i}" --command="${remote}"
    done
    return 0
  fi
  mkdir -p "${log_dir}"
  for ((i = 0; i < workers; i++)); do
    "${GCLOUD}" compute tpus tpu-vm ssh "${TPU_NAME}" "${LOCATION[@]}" --worker="${i}" \
      --command="${remote}" >"${log_dir}/worker-${i}.log" 2>&1 &
    pids+=($!)
  done
  tail -n +1 -F "${log_dir}/worker-0.log" &
  local tail_pid=$! failed=()
  for ((i = 0; i < workers; i++)); do
    wait "${pids[$i]}" || failed+=("${i}")
  done
  kill "${tail_pid}" 2>/dev/null
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "pod.sh: workers failed: ${failed[*]} (logs in ${log_dir})" >&2
    return 1
  fi
  echo "pod.sh: all ${workers} workers finished (logs in ${log_dir})"
}

cmd_logs() {
  local log_dir="${ROOT}/logs/${TPU_NAME}"
  [ -d "${log_dir}" ] || die "no logs in ${log_dir}: start a run first"
  tail -n 50 -F "${log_dir}"/worker-*.log
}

cmd_stop() {
  # Our processes, then stale holders of the TPU and libtpu's lock file.
  ssh_all "pkill -f 'recipes\\.' ; sudo fuser -k /dev/accel* /dev/vfio/* 2>/dev/null; sudo rm -f /tmp/libtpu_lockfile; true"
}

cmd_delete() {
  gcloud_do compute tpus tpu-vm delete "${TPU_NAME}" "${LOCATION[@]}" --quiet
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
      --spot) SPOT=1 ;;
      -h|--help) usage; exit 0 ;;
      --) shift; break ;;
      -*) die "unknown option $1 (see --help)" ;;
      *) [ -z "${subcommand}" ] || die "one subcommand at a time: got ${subcommand} and $1"
         subcommand="$1" ;;
    esac
    shift
  done
  case "${subcommand}" in
    create|queued|copy|install|run|logs|stop|delete) ;;
    "") usage >&2; die "no subcommand given" ;;
    *) die "unknown subcommand ${subcommand} (see --help)" ;;
  esac
  [ "${DRY_RUN}" = 1 ] || [ "${subcommand}" = logs ] || require_gcloud
  resolve_settings
  "cmd_${subcommand}" "$@"
}

main "$@"
