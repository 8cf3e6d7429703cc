#!/usr/bin/env bash
# Two step lists side by side on a 2-GPU machine, one per GPU (bench/h200_gpu.sh runs each list).
# Results go to $RESULTS/<issue>/ (from the script's name); at the end every result is packed into $OUT/results.tgz
# (without drafter weights) and each GPU's log tail is printed.
#
#   bash bench/h200_pair.sh "issue4 train; issue4 calibrate" "issue5 dflash; TEMP=1 issue5 bench"
set -uo pipefail
cd "$(dirname "$0")/.."
results=${RESULTS:-/root/results}
mkdir -p "$results" "${OUT:-/tmp/out}"
stamp=$(date +%H%M%S)
bash bench/h200_gpu.sh 0 "${1:-}" > "$results/gpu0-$stamp.log" 2>&1 & p0=$!
bash bench/h200_gpu.sh 1 "${2:-}" > "$results/gpu1-$stamp.log" 2>&1 & p1=$!
wait $p0; s0=$?; wait $p1; s1=$?
tar czf "${OUT:-/tmp/out}/results.tgz" -C "$(dirname "$results")" --exclude='*.safetensors' "$(basename "$results")"
for g in 0 1; do echo "######## gpu $g"; tail -n "${TAIL:-60}" "$results/gpu$g-$stamp.log" | cut -c1-400; done
exit $(( s0 || s1 ))
