#!/usr/bin/env bash
# Train the shipped SmolLM2-135M EAGLE-3 drafter on a lent GPU machine, after its GGUF chunks were staged there:
#
#   bash bench/h200_smollm_drafter.sh setup      # gguf wheel, reassemble + sha256-check, ShareGPT subset
#   bash bench/h200_smollm_drafter.sh distill    # self-distillation data (resumable: run again to continue)
#   bash bench/h200_smollm_drafter.sh train      # EAGLE-3 training (resumable), export, copy results to $OUT
#
# Carried: .whl (gguf), .stage/smollm2-135m/SHA256SUM, .stage/datasets_sg (first 8000 ShareGPT records, gzipped).
# Chunks are expected in /root/stage/smollm2-135m/. Set TIME_LIMIT (seconds) to bound a call.
set -euo pipefail
cd "$(dirname "$0")/.."
export JSPEC_HOME=/root/jspec_home PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out} work=/root/work
case "${1:?setup|distill|train}" in
  setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    bash scripts/device_stage.sh assemble smollm2-135m /root/stage/smollm2-135m "$JSPEC_HOME"
    mkdir -p "$JSPEC_HOME/datasets" && gunzip -c .stage/datasets_sg/sharegpt.jsonl.gz > "$JSPEC_HOME/datasets/sharegpt.jsonl" ;;
  distill)
    timeout "${TIME_LIMIT:-540}" python3 -m jspec.cli train distill --model smollm2-135m --out "$work/distill" \
      --num-prompts "${PROMPTS:-4096}" --max-prompt-tokens 512 --max-new-tokens 256 --batch-size 128 \
      --shard-size 256 --dtype bfloat16 2>&1 | tr '\r' '\n' | grep -v '^\s*$' | tail -n 5 ;;
  train)
    python3 -m jspec.cli train eagle3 --model smollm2-135m --data "$work/distill" --out "$work/eagle3" \
      --steps "${STEPS:-3000}" --batch-size 32 --seq-len 768 --draft-vocab-size 8192 --intermediate-size 1280 \
      --eval-records 64 --eval-every 500 --save-every 500 --dtype bfloat16 --resume \
      --time-limit "${TIME_LIMIT:-420}" 2>&1 | tr '\r' '\n' | grep -v '^\s*$' | grep -v 'it/s' | tail -n 25
    python3 -m jspec.cli train eagle3 --model smollm2-135m --data "$work/distill" --out "$work/eagle3" --export
    mkdir -p "$out/drafter" && cp -r "$work/eagle3/drafter/." "$out/drafter/"
    cp "$work"/eagle3/*.png "$work"/eagle3/*.jsonl "$out/" 2>/dev/null || true
    ls -la "$out" "$out/drafter" ;;
esac
