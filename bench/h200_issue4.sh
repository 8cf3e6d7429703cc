#!/usr/bin/env bash
# Graft's H200 figures on Qwen2.5-Coder-1.5B, after its GGUF chunks were staged (scripts/device_stage.sh) and
# `bash bench/h200_issue3.sh setup` assembled them. Each step fits one 10-minute device call; rerun a step that
# stopped on its time limit (distill and training resume).
#
#   bash bench/h200_issue4.sh sharegpt    # ShareGPT subset (carried gzipped in .stage/datasets_sg)
#   bash bench/h200_issue4.sh distill     # self-distillation data from the 1.5B (resumable)
#   bash bench/h200_issue4.sh train       # EAGLE-3 drafter, official recipe shape (resumable; TIME_LIMIT seconds)
#   bash bench/h200_issue4.sh calibrate   # graft thresholds + warm adjacency from 5 ShareGPT prompts
#   bash bench/h200_issue4.sh bench       # 7 methods x 5 tasks, 20 prompts, 256 tokens, T = 0 (T=1: TEMP=1)
#   bash bench/h200_issue4.sh throughput  # eagle3 vs graft at batch 1/4/8/16
set -euo pipefail
cd "$(dirname "$0")/.."
export JSPEC_HOME=/root/jspec_home PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out} work=/root/work model=qwen2.5-coder-1.5b
quiet() { tr '\r' '\n' | grep -v '^\s*$' | grep -v 'it/s\]$' | tail -n "${1:-8}"; }
case "${1:?sharegpt|distill|train|calibrate|bench|throughput}" in
  sharegpt)
    gunzip -c .stage/datasets_sg/sharegpt.jsonl.gz > "$JSPEC_HOME/datasets/sharegpt.jsonl" ;;
  distill)
    timeout "${TIME_LIMIT:-540}" python3 -m jspec.cli train distill --model $model --out "$work/distill" \
      --num-prompts "${PROMPTS:-4096}" --max-prompt-tokens 512 --max-new-tokens 256 --batch-size 128 \
      --shard-size 256 --dtype bfloat16 2>&1 | quiet 4 ;;
  train)
    python3 -m jspec.cli train eagle3 --model $model --data "$work/distill" --out "$work/eagle3" \
      --steps "${STEPS:-2000}" --batch-size 16 --seq-len 1024 --draft-vocab-size 32000 --eval-records 64 \
      --eval-every 500 --save-every 250 --dtype bfloat16 --resume --time-limit "${TIME_LIMIT:-520}" 2>&1 | quiet 12
    python3 -m jspec.cli train eagle3 --model $model --data "$work/distill" --out "$work/eagle3" --export
    cp "$work"/eagle3/{metrics.jsonl,run.json} "$out/" && cp "$work"/eagle3/*.png "$out/" 2>/dev/null || true ;;
  calibrate)
    python3 -m jspec.cli calibrate --model $model --method graft --drafter "$work/eagle3/drafter" --warmup 5 \
      --dtype bfloat16 --out "$work/graft_state.npz" 2>&1 | quiet 3 ;;
  bench)
    python3 -m jspec.cli bench --model $model --methods vanilla,pld,token_recycling,eagle3,eagle3_pruned,graft,graft_fixed \
      --eagle3-drafter "$work/eagle3/drafter" --method-state graft="$work/graft_state.npz" \
      --method-state eagle3_pruned="$work/graft_state.npz" --dataset humaneval,gsm8k,mtbench,alpaca,xsum \
      --limit "${LIMIT:-20}" --max-new-tokens 256 --temperature "${TEMP:-0}" --dtype bfloat16 \
      --out "$out/bench_t${TEMP:-0}" > "$out/bench.log" 2>&1 || { tail -c 4000 "$out/bench.log"; exit 1; }
    cat "$out/bench_t${TEMP:-0}/summary.md" ;;
  throughput)
    python3 bench/throughput.py --model $model --methods eagle3,graft --batch-sizes 1,4,8,16 --dataset humaneval \
      --max-new-tokens 256 --eagle3-drafter "$work/eagle3/drafter" --out "$out/throughput" ;;
esac
