#!/usr/bin/env bash
# Longer DFlash and Domino training on a two-GPU machine, then their 5-task bench split over both GPUs; started once
# under setsid after `bash bench/h200_issue3.sh setup` (MODELS=qwen2.5-coder-1.5b), it runs across device calls:
#
#   STEPS=800 GPU1_FIRST="issue3 tr-stats; issue3 tr-tuned" WAIT_PID=1234 \
#     setsid nohup bash bench/h200_long_training.sh > /root/long.log 2>&1 < /dev/null &
#
# GPU 0: distilled data (issue4 distill), then Domino (TF + curriculum). GPU 1: GPU1_FIRST (a bench/h200_gpu.sh list
# that needs no drafter; it starts once WAIT_PID, an earlier list on GPU 1, has ended), then DFlash once the data is
# there. Both drafters train STEPS steps on the same data (same schedule, time limit TIME_LIMIT s). Then
# `issue5 bench` on BENCH0_TASKS (GPU 0) and BENCH1_TASKS (GPU 1), each to its own folder; `touch $RESULTS/done`
# marks the end.
set -uo pipefail
cd "$(dirname "$0")/.."
results=${RESULTS:-/root/results}
mkdir -p "$results"
steps=${STEPS:?STEPS}
train="STEPS=$steps TIME_LIMIT=${TIME_LIMIT:-1500}"
rm -f "$results/distill.done" "$results/done"

gpu0() {
  bash bench/h200_gpu.sh 0 "issue4 distill"
  touch "$results/distill.done"
  bash bench/h200_gpu.sh 0 "$train issue5 domino"
}
gpu1() {
  if [ -n "${WAIT_PID:-}" ]; then while kill -0 "$WAIT_PID" 2>/dev/null; do sleep 5; done; fi
  [ -z "${GPU1_FIRST:-}" ] || bash bench/h200_gpu.sh 1 "$GPU1_FIRST"
  until [ -f "$results/distill.done" ]; do sleep 5; done
  bash bench/h200_gpu.sh 1 "$train issue5 dflash"
}
gpu0 & p0=$!; gpu1 & p1=$!
wait $p0 $p1
bash bench/h200_gpu.sh 0 "TASKS=${BENCH0_TASKS:-humaneval,gsm8k,mtbench} BENCH_NAME=bench5_t0_gpu0 issue5 bench" & p0=$!
bash bench/h200_gpu.sh 1 "TASKS=${BENCH1_TASKS:-alpaca,xsum} BENCH_NAME=bench5_t0_gpu1 issue5 bench" & p1=$!
wait $p0 $p1
touch "$results/done"
