#!/usr/bin/env bash
# The light results of a device job still running, into $OUT as one file, so that every polling call brings back
# what exists so far: a machine taken back mid-run loses /root, but not what the last poll fetched.
#
#   bash bench/h200_snapshot.sh /root/tb.log     # in each polling call (from the repo root); prints the log's tail
#
# Leaves out checkpoints, exported drafters and distilled data (the bulk); keeps metrics, run settings, bench and
# task-walk summaries, and the logs. The distilled data packed by train-bench (results/distilled, bench/
# distilled_parts.sh) comes back once, as $OUT/distilled/: keep it here as .stage/distilled for a later session.
set -uo pipefail
root=${SNAPSHOT_ROOT:-/root}
(cd "$root" && tar czf "${OUT:?}/snapshot.tgz" --exclude='*/checkpoints' --exclude='*/drafter' --exclude='*/data' \
  --exclude='results/distilled' --exclude='work/distill/*.npz' $(ls -d results work/*/metrics.jsonl work/*/run.json \
  work/distill/manifest.json ./*.log 2>/dev/null)) || echo "snapshot: nothing to pack yet"
parts=$root/results/distilled
if [ -f "$parts/SHA256SUM" ] && [ ! -e "$parts.sent" ]; then
  mkdir -p "$OUT/distilled" && cp "$parts"/* "$OUT/distilled/" && touch "$parts.sent" \
    && echo "snapshot: distilled data parts in \$OUT/distilled ($(du -sh "$parts" | cut -f1))"
fi
for log in "$@"; do tail -c "${TAIL_BYTES:-600}" "$log"; echo; done
