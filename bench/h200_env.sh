# Shared settings of the bench/h200_issue*.sh scripts (sourced, not run). Every value can be overridden from the
# environment, which is how the same scripts are dry-run on a CPU with SmolLM2 and tiny sizes:
#   MODEL=smollm2-135m JSPEC_HOME=~/.cache/jspec WORK=/tmp/dry OUT=/tmp/dry/out BATCH=2 SEQ=256 ... bash bench/...
export JSPEC_HOME=${JSPEC_HOME:-/root/jspec_home} PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out} work=${WORK:-/root/work} model=${MODEL:-qwen2.5-coder-1.5b} dtype=${DTYPE:-bfloat16}
mkdir -p "$out" "$work"
# One data budget for every drafter: the same distilled data, packed rows per step and number of steps.
train_shape="--batch-size ${BATCH:-16} --seq-len ${SEQ:-1024} --dtype $dtype"
draft_vocab=${DRAFT_VOCAB:-32000}
bench_size="--limit ${LIMIT:-20} --max-new-tokens ${MAX_NEW:-256} --dtype $dtype"
tasks=${TASKS:-humaneval,gsm8k,mtbench,alpaca,xsum}

quiet() { tr '\r' '\n' | grep -v '^\s*$' | grep -v 'it/s\]$' | grep -v 's/it\]$' | tail -n "${1:-8}"; }

# Steps of every drafter run: STEPS, else what the slowest probed trainer makes in TRAIN_SECONDS (bench/h200_issue5.sh
# probe writes the rates), so that each learning-rate schedule ends inside one call.
train_steps() {
  if [ -n "${STEPS:-}" ]; then echo "$STEPS"; return; fi
  python3 bench/train_rates.py --steps-for "${TRAIN_SECONDS:-300}" --from "$work/rates.json"
}
warmup_for() { echo $(( $1 / 10 < 100 ? $1 / 10 : 100 )); }  # linear warm-up: 10% of a short run, at most 100 steps
