#!/usr/bin/env bash
# Issue 5's ablation on ONE GPU, started once under setsid after `bash bench/h200_issue3.sh setup`
# (MODELS=qwen2.5-coder-1.5b); it runs across device calls:
#
#   STEPS=200 setsid nohup bash bench/h200_domino_ablation.sh > /root/ablation.log 2>&1 < /dev/null &
#
# Distilled data (issue4 sharegpt + distill, PROMPTS answers), then DFlash (unless DFLASH=0) and the Domino variants
# of VARIANTS (default tf_curriculum,tf,ttt), each STEPS steps on the same data. Distillation is greedy and training
# seeded, so a later run of one variant (VARIANTS=ttt DFLASH=0) repeats an earlier run's recipe (GPU autotuning may
# still change a few distilled tokens). As soon as a Domino variant is trained, its `issue5 ablation` bench (GSM8K +
# HumanEval: vanilla, domino, dflash when trained; the TF + curriculum run also with its head off) runs beside the
# next training, without preallocating GPU memory. Sharing the GPU makes its timings
# meaningless, so only MAT is read from these benches. The table and plot: $RESULTS/issue5/ablation.{md,png};
# `touch $RESULTS/done` marks the end.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD
results=${RESULTS:-/root/results}
variants=${VARIANTS:-tf_curriculum,tf,ttt}
work=${WORK:-/root/work}
mkdir -p "$results"
rm -f "$results/done"
# A device machine can keep an earlier session's files, and training resumes from checkpoints it finds: start clean.
stale=("$work/distill" "$work/dflash")
for v in ${variants//,/ }; do stale+=("$work/domino_$v" "$results/issue5/ablation_$v"); done
rm -rf "${stale[@]}"
train="STEPS=${STEPS:?STEPS} TIME_LIMIT=${TIME_LIMIT:-900}"

first="issue4 sharegpt; PROMPTS=${PROMPTS:-5120} issue4 distill"
[ "${DFLASH:-1}" = 0 ] || first+="; $train issue5 dflash"
bash bench/h200_gpu.sh 0 "$first"
bench_pid=""
for v in ${variants//,/ }; do
  bash bench/h200_gpu.sh 0 "$train issue5 domino $v"
  [ -z "$bench_pid" ] || wait "$bench_pid"
  XLA_PYTHON_CLIENT_PREALLOCATE=false bash bench/h200_gpu.sh 0 "VARIANTS=$v issue5 ablation" & bench_pid=$!
done
[ -z "$bench_pid" ] || wait "$bench_pid"
folders=(); for v in ${variants//,/ }; do
  [ -f "$results/issue5/ablation_$v/results.jsonl" ] && folders+=("$results/issue5/ablation_$v")
done
[ ${#folders[@]} -eq 0 ] || python3 bench/plot_ablation.py "${folders[@]}" --out "$results/issue5/ablation" --mat-only
touch "$results/done"
