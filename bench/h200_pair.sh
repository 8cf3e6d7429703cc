#!/usr/bin/env bash
# Two step lists side by side on a 2-GPU machine, one per GPU; each list is `[VAR=VALUE ...] script step [arg]` items
# joined by ';' (script: issue4 for bench/h200_issue4.sh, ...).
# Results go to $RESULTS/<issue>/ (from the script's name); at the end every result is packed into $OUT/results.tgz
# (without drafter weights) and each GPU's log tail is printed.
#
#   bash bench/h200_pair.sh "issue4 train; issue4 calibrate" "issue5 dflash; TEMP=1 issue5 bench"
set -uo pipefail
cd "$(dirname "$0")/.."
results=${RESULTS:-/root/results}
mkdir -p "$results" "${OUT:-/tmp/out}"
run_list() {  # gpu list
  local gpu=$1 status=0 item words envs
  IFS=';' read -ra items <<< "$2"
  for item in "${items[@]}"; do
    read -ra words <<< "$item"
    envs=()
    while [ ${#words[@]} -gt 0 ] && [[ ${words[0]} == *=* ]]; do envs+=("${words[0]}"); words=("${words[@]:1}"); done
    [ ${#words[@]} -gt 0 ] || continue
    echo "=== gpu $gpu: $item ($(date +%T))"
    env "${envs[@]}" CUDA_VISIBLE_DEVICES="$gpu" OUT="$results/${words[0]}" bash "bench/h200_${words[0]}.sh" \
      "${words[@]:1}" || { status=$?; echo "FAILED ($status): $item"; }
  done
  echo "=== gpu $gpu done ($(date +%T))"
  return $status
}
stamp=$(date +%H%M%S)
run_list 0 "${1:-}" > "$results/gpu0-$stamp.log" 2>&1 & p0=$!
run_list 1 "${2:-}" > "$results/gpu1-$stamp.log" 2>&1 & p1=$!
wait $p0; s0=$?; wait $p1; s1=$?
tar czf "${OUT:-/tmp/out}/results.tgz" -C "$(dirname "$results")" --exclude='*.safetensors' "$(basename "$results")"
for g in 0 1; do echo "######## gpu $g"; tail -n "${TAIL:-60}" "$results/gpu$g-$stamp.log" | cut -c1-400; done
exit $(( s0 || s1 ))
