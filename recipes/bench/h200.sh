#!/usr/bin/env bash
# The GPU benchmark on one H200 (or any one GPU), in one command: ResNet-50
# and ViT-B/16, bfloat16, batch 256, the train step under jit and each recipe
# strategy on one GPU, plus a one-step profile of each model. ViT runs with
# its default attention ('auto': cuDNN's fused kernel where it takes the
# shapes) and once with XLA's, to see what the fused kernel buys.
#
#   OUT=/tmp/h200 bash recipes/bench/h200.sh
#
# It needs jax, flax, optax and clu (the step's metrics, recipes/core/metrics.py);
# not TensorFlow, TFDS or ml_collections. On a machine without clu, put its
# wheel in .whl/ first (clu's own needs come with jax and flax, so
# --no-deps); the script installs it under /tmp/site:
#
#   pip download clu==0.0.12 --no-deps -d .whl/     # .whl/ is git-ignored
#
# About 6-8 minutes. results.jsonl and log.txt grow run by run, so a run
# that is stopped early still keeps the runs before it.
#
# $OUT gets results.jsonl (one recipes.bench JSON a line), log.txt (the
# tables, the largest ops of each profiled step, errors), env.txt and
# traces.tar.gz (the jax.profiler traces; open them in Perfetto/TensorBoard).
# BATCH, STEPS, CONVNET and VIT override the defaults (for a small CPU try).
set -u
OUT=${OUT:-/tmp/h200_out}
BATCH=${BATCH:-256} STEPS=${STEPS:-20} CONVNET=${CONVNET:-resnet50}
VIT=${VIT:-vit_b16}
mkdir -p "$OUT"
export TF_CPP_MIN_LOG_LEVEL=2
PY=${PY:-python3}
LOG="$OUT/log.txt"

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import sys, jax, flax, optax; print(sys.version); print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__); print(jax.devices())'
} >"$OUT/env.txt" 2>&1

if ! $PY -c 'import clu' 2>/dev/null; then
  # Beside the system's packages, not into them: /tmp/site on PYTHONPATH.
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 ||
    echo "clu is missing and .whl/ holds no wheel: see the header" >>"$LOG"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

TRACES=/tmp/h200_traces
JSON=/tmp/h200_json
mkdir -p "$TRACES" "$JSON"

bench() {  # NAME [FLAGS...]: one run; its JSON line goes to results.jsonl.
  local name=$1
  shift
  echo "=== $name: $*" >>"$LOG"
  timeout 240 $PY -m recipes.bench --dtype=bfloat16 --batch_size="$BATCH" \
    --devices=1 --steps="$STEPS" --warmup=3 --json="$JSON/$name.json" "$@" \
    >>"$LOG" 2>&1 || echo "=== $name failed or timed out (rc $?)" >>"$LOG"
  [ -f "$JSON/$name.json" ] && $PY -c 'import json, sys
print(json.dumps(json.load(open(sys.argv[1]))))' "$JSON/$name.json" \
    >>"$OUT/results.jsonl"
}

# Most wanted first: a time-out still leaves the earlier results. ViT with
# XLA's attention comes early too: should cuDNN's kernel ('auto') fail on a
# machine, that must not cost the ViT number.
bench ${CONVNET}_jit --model="$CONVNET" --strategy=jit --profile="$TRACES/$CONVNET"
bench ${VIT}_jit --model="$VIT" --strategy=jit --profile="$TRACES/$VIT"
bench ${VIT}_jit_xla --model="$VIT" --strategy=jit --attention_impl=xla
bench ${CONVNET}_pmap --model="$CONVNET" --strategy=pmap
bench ${CONVNET}_sharded --model="$CONVNET" --strategy=sharded
bench ${CONVNET}_shard_map --model="$CONVNET" --strategy=shard_map
bench ${VIT}_pmap --model="$VIT" --strategy=pmap
bench ${VIT}_sharded --model="$VIT" --strategy=sharded
bench ${VIT}_shard_map --model="$VIT" --strategy=shard_map

tar -czf "$OUT/traces.tar.gz" -C "$TRACES" . 2>>"$LOG"
if [ "$(stat -c %s "$OUT/traces.tar.gz")" -gt 15000000 ]; then
  # Large: keep the Perfetto traces only.
  (cd "$TRACES" && find . -name 'perfetto_trace.json.gz' -print0 |
    tar -czf "$OUT/traces.tar.gz" --null -T -)
fi

# One table of everything, at the end of the log.
$PY - "$OUT/results.jsonl" >>"$LOG" 2>&1 <<'EOF'
import json, sys
print('| model | strategy | attention | compile s | step ms | images/s '
      '| TFLOP/s | MFU | peak GiB |')
print('|---|---|---|---|---|---|---|---|---|')
for line in open(sys.argv[1]):
  r = json.loads(line)
  mem = r['peak_memory_bytes']
  default = 'auto' if r['model'].startswith('vit') else '-'
  attention = r['model_kwargs'].get('attention_impl', default)
  print(f"| {r['model']} | {r['strategy']} "
        f"| {attention} "
        f"| {r['compile_time_s']:.1f} | {r['step_time_median_s'] * 1e3:.1f} "
        f"| {r['images_per_sec']:,.0f} | {r['tflops_per_sec']:.0f} "
        f"| {'-' if r['mfu'] is None else format(r['mfu'], '.1%')} "
        f"| {'-' if mem is None else format(mem / 2**30, '.1f')} |")
EOF
tail -n 12 "$LOG"
