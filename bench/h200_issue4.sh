#!/usr/bin/env bash
# Graft's H200 figures on Qwen2.5-Coder-1.5B, after its GGUF chunks were staged (scripts/device_stage.sh) and
# `bash bench/h200_issue3.sh setup` assembled them. Each step fits one 10-minute device call; rerun a step that
# stopped on its time limit (distill and training resume). Settings: bench/h200_env.sh.
#
#   bash bench/h200_issue4.sh sharegpt    # ShareGPT subset (carried gzipped in .stage/datasets_sg)
#   bash bench/h200_issue4.sh distill     # self-distillation data from the 1.5B (resumable; PROMPTS answers to
#                                         # the prompts past the first DISTILL_SKIP, default 0; TURNS=followups:
#                                         # ShareGPT's later turns, MAX_PROMPT tokens of history and turn, into
#                                         # DISTILL_DIR instead of $work/distill; DATASET: another prompt source
#                                         # than sharegpt; AFTER=DIR[,DIR]: --after, past the records they answered;
#                                         # DISTILL_TEMP / DISTILL_SEED: sampled answers, e.g. 1 / 1)
#   bash bench/h200_issue4.sh train       # EAGLE-3 drafter (steps: STEPS or the probed rate, h200_issue5.sh probe)
#   bash bench/h200_issue4.sh calibrate   # graft thresholds + warm adjacency from 5 ShareGPT prompts
#   bash bench/h200_issue4.sh bench       # 7 methods x 5 tasks, 20 prompts, 256 tokens, T = 0
#   TEMP=1 bash bench/h200_issue4.sh bench  # T = 1: vanilla, token_recycling, eagle3, eagle3_pruned, graft
#   bash bench/h200_issue4.sh throughput  # eagle3 vs graft at batch 1/4/8/16
#   bash bench/h200_issue4.sh breakdown   # per-step time of token_recycling, eagle3, graft by part
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/h200_env.sh
case "${1:?sharegpt|distill|train|calibrate|bench|throughput|breakdown}" in
  sharegpt)
    mkdir -p "$JSPEC_HOME/datasets"
    gunzip -c .stage/datasets_sg/sharegpt.jsonl.gz > "$JSPEC_HOME/datasets/sharegpt.jsonl" ;;
  distill)
    dir=${DISTILL_DIR:-$work/distill}
    timeout "${TIME_LIMIT:-540}" python3 -m jspec.cli train distill --model "$model" --out "$dir" \
      --dataset "${DATASET:-sharegpt}" ${AFTER:+--after "$AFTER"} \
      --num-prompts "${PROMPTS:-7168}" --skip "${DISTILL_SKIP:-0}" --turns "${TURNS:-first}" \
      --max-prompt-tokens "${MAX_PROMPT:-512}" --max-new-tokens 256 --batch-size "${DBATCH:-256}" \
      --shard-size "${DBATCH:-256}" --temperature "${DISTILL_TEMP:-0}" --seed "${DISTILL_SEED:-0}" \
      --dtype "$dtype" 2>&1 | quiet 4
    python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print('distill shards', m['shards'])" \
      "$dir/manifest.json" ;;
  train)
    steps=$(train_steps)
    echo "eagle3: $steps steps"
    python3 -m jspec.cli train eagle3 --model "$model" --data "$work/distill" --out "$work/eagle3" --steps "$steps" \
      --warmup-steps "$(warmup_for "$steps")" $train_shape --draft-vocab-size "$draft_vocab" \
      --eval-records "${EVAL_RECORDS:-64}" --eval-every $(( steps / 4 > 0 ? steps / 4 : 1 )) --save-every 250 --resume --time-limit "${TIME_LIMIT:-420}" 2>&1 | quiet 12
    python3 -m jspec.cli train eagle3 --model "$model" --data "$work/distill" --out "$work/eagle3" --export
    mkdir -p "$out/eagle3" && cp "$work"/eagle3/{metrics.jsonl,run.json} "$out/eagle3/"
    cp "$work"/eagle3/*.png "$out/eagle3/" 2>/dev/null || true ;;
  calibrate)
    python3 -m jspec.cli calibrate --model "$model" --method graft --drafter "$work/eagle3/drafter" --warmup 5 \
      --dtype "$dtype" --out "$work/graft_state.npz" 2>&1 | quiet 3 ;;
  bench)
    temp=${TEMP:-0}
    methods=vanilla,pld,token_recycling,eagle3,eagle3_pruned,graft,graft_fixed
    [ "$temp" = 0 ] || methods=vanilla,token_recycling,eagle3,eagle3_pruned,graft
    python3 -m jspec.cli bench --model "$model" --methods "$methods" \
      --eagle3-drafter "$work/eagle3/drafter" --method-state graft="$work/graft_state.npz" \
      --method-state eagle3_pruned="$work/graft_state.npz" --dataset "$tasks" $bench_size --temperature "$temp" \
      --out "$out/bench_t$temp" > "$out/bench_t$temp.log" 2>&1 || { tail -c 4000 "$out/bench_t$temp.log"; exit 1; }
    cat "$out/bench_t$temp/summary.md" ;;
  throughput)
    python3 bench/throughput.py --model "$model" --methods eagle3,graft --batch-sizes "${BATCHES:-1,4,8,16}" \
      --dataset humaneval --max-new-tokens "${MAX_NEW:-256}" --dtype "$dtype" --eagle3-drafter "$work/eagle3/drafter" \
      --method-state graft="$work/graft_state.npz" --out "$out/throughput" ;;
  breakdown)
    python3 bench/step_breakdown.py --model "$model" --methods token_recycling,eagle3,graft --dtype "$dtype" \
      --eagle3-drafter "$work/eagle3/drafter" --method-state graft="$work/graft_state.npz" \
      --steps "${BREAKDOWN_STEPS:-64}" --reps "${BREAKDOWN_REPS:-10}" --out "$out/breakdown" 2>&1 | tail -n 6 ;;
esac
