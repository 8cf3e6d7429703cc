#!/usr/bin/env bash
# One step list on one GPU: `[VAR=VALUE ...] script step [arg]` items joined by ';' (script: issue4 for
# bench/h200_issue4.sh, ...), run in order; a failed item is reported and the list goes on. Results go to
# $RESULTS/<issue>/ (from the script's name). bench/h200_pair.sh runs two lists side by side; to keep a list running
# across device calls (while later calls stage model chunks), start it in its own session:
#
#   setsid nohup bash bench/h200_gpu.sh 1 "issue3 kernels; issue3 tr-warm" > /root/gpu1.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/.."
gpu=${1:?gpu index}; list=${2:-}
results=${RESULTS:-/root/results}
mkdir -p "$results"
status=0
IFS=';' read -ra items <<< "$list"
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
exit $status
