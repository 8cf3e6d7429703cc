#!/usr/bin/env bash
# Longer DFlash and Domino training on a two-GPU machine, then their 5-task bench split over both GPUs; started once
# under setsid after `bash bench/h200_issue3.sh setup` (MODELS=qwen2.5-coder-1.5b), it runs across device calls:
#
#   STEPS=800 B_FIRST="issue3 tr-stats; issue3 tr-tuned" WAIT_PID_B=1234 \
#     setsid nohup bash bench/h200_long_training.sh > /root/long.log 2>&1 < /dev/null &
#
# GPU A (A=0 unless set): distilled data (issue4 distill), then Domino (TF + curriculum). GPU B, the other one:
# B_FIRST (a bench/h200_gpu.sh list that needs no drafter), then DFlash once the data is there. Each GPU first waits
# for WAIT_PID_A / WAIT_PID_B, a process still using it, to end. Both drafters train STEPS steps on the same data
# (same schedule, time limit TIME_LIMIT s). Then `issue5 bench` on BENCH_A_TASKS (GPU A) and BENCH_B_TASKS (GPU B),
# each to its own folder, merged into issue5/bench5_t0 (`jspec report`); `touch $RESULTS/done` marks the end.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD
results=${RESULTS:-/root/results}
mkdir -p "$results"
steps=${STEPS:?STEPS}
train="STEPS=$steps TIME_LIMIT=${TIME_LIMIT:-1500}"
rm -f "$results/distill.done" "$results/done"

a=${A:-0}; b=$(( 1 - a ))
wait_for() { [ -z "${1:-}" ] || while kill -0 "$1" 2>/dev/null; do sleep 5; done; }
gpu_a() {
  wait_for "${WAIT_PID_A:-}"
  bash bench/h200_gpu.sh "$a" "issue4 distill"
  touch "$results/distill.done"
  bash bench/h200_gpu.sh "$a" "$train issue5 domino"
}
gpu_b() {
  wait_for "${WAIT_PID_B:-}"
  [ -z "${B_FIRST:-}" ] || bash bench/h200_gpu.sh "$b" "$B_FIRST"
  until [ -f "$results/distill.done" ]; do sleep 5; done
  bash bench/h200_gpu.sh "$b" "$train issue5 dflash"
}
gpu_a & pa=$!; gpu_b & pb=$!
wait $pa $pb
bash bench/h200_gpu.sh "$a" "TASKS=${BENCH_A_TASKS:-humaneval,gsm8k,mtbench} BENCH_NAME=bench5_t0_a issue5 bench" & pa=$!
bash bench/h200_gpu.sh "$b" "TASKS=${BENCH_B_TASKS:-alpaca,xsum} BENCH_NAME=bench5_t0_b issue5 bench" & pb=$!
wait $pa $pb
python3 -m jspec.cli report "$results"/issue5/bench5_t0_{a,b} --out "$results/issue5/bench5_t0"
touch "$results/done"
