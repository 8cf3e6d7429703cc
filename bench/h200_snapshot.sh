#!/usr/bin/env bash
# The light results of a device job still running, into $OUT as one file, so that every polling call brings back
# what exists so far: a machine taken back mid-run loses /root, but not what the last poll fetched.
#
#   bash bench/h200_snapshot.sh /root/tb.log     # in each polling call (from the repo root); prints the log's tail
#
# Leaves out checkpoints, exported drafters and distilled data (the bulk); keeps metrics, run settings, bench and
# task-walk summaries, and the logs. Folders packed by bench/parts.sh under results/ (distilled,
# distilled_followups, task_data, fresh_data, sampled_data, drafters_dflash, drafters_domino,
# drafters_domino_head) come back too,
# PARTS_PER_CALL (4) parts a call, as $OUT/<name>/: gather them here under .stage/<name>/ for a later session.
set -uo pipefail
root=${SNAPSHOT_ROOT:-/root}
(cd "$root" && tar czf "${OUT:?}/snapshot.tgz" --exclude='*/checkpoints' --exclude='*/drafter' --exclude='*/data' \
  --exclude='results/distilled*' --exclude='results/task_data*' --exclude='results/drafters*' \
  --exclude='results/fresh_data*' --exclude='results/sampled_data*' --exclude='work/distill/*.npz' \
  $(ls -d results work/*/metrics.jsonl work/*/run.json work/distill/manifest.json ./*.log 2>/dev/null)) \
  || echo "snapshot: nothing to pack yet"
budget=${PARTS_PER_CALL:-4}
packed_sets="distilled distilled_followups task_data fresh_data sampled_data"
packed_sets+=" drafters_dflash drafters_domino drafters_domino_head"
for name in $packed_sets; do
  packed=$root/results/$name
  [ -f "$packed/SHA256SUM" ] && [ "$budget" -gt 0 ] || continue
  line=$(bash "$(dirname "$0")/parts.sh" send "$packed" "$budget") || continue
  [[ $line == "sent 0 parts"* ]] || echo "snapshot: $line"
  budget=$(( budget - $(echo "$line" | awk '{print $2}') ))
done
for log in "$@"; do tail -c "${TAIL_BYTES:-600}" "$log"; echo; done
