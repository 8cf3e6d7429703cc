#!/usr/bin/env bash
# Distilled training data kept across device sessions, so that a later session trains instead of regenerating it
# (8192 ShareGPT answers plus the tasks' later answers cost about 4 device minutes). What comes back through $OUT is
# at most 16 MiB a file, so the data travels as a gzipped tar in parts of at most 15 MiB, with their SHA256SUM:
#
#   bash bench/distilled_parts.sh pack /root/work /root/results/distilled    # on the GPU: distill/ (+ task_data/)
#   bash bench/distilled_parts.sh unpack .stage/distilled /root/work          # checks the sums, then untars
#
# bench/h200_snapshot.sh sends a packed folder back once; keep it here as .stage/distilled (ignored by git) and carry
# it in a later session: DISTILLED=.stage/distilled for bench/h200_domino_relations.sh train-bench.
set -euo pipefail
cmd=${1:?pack|unpack}; src=${2:?source folder}; dest=${3:?destination folder}
case "$cmd" in
  pack)
    [ -f "$src/distill/manifest.json" ] || { echo "no distilled data in $src/distill" >&2; exit 2; }
    folders=(distill); [ -d "$src/task_data" ] && folders+=(task_data)
    rm -rf "$dest"; mkdir -p "$dest"
    tar czf - -C "$src" "${folders[@]}" | split -b "${PART_SIZE:-15M}" -d -a 2 - "$dest/distilled.tgz.part-"
    (cd "$dest" && sha256sum distilled.tgz.part-* > SHA256SUM)
    echo "packed ${folders[*]} into $(ls "$dest" | grep -c part-) parts ($(du -sh "$dest" | cut -f1)) in $dest" ;;
  unpack)
    [ -f "$src/SHA256SUM" ] || { echo "$src has no SHA256SUM: not a folder written by '$0 pack'" >&2; exit 2; }
    (cd "$src" && sha256sum --quiet -c SHA256SUM) || { echo "$src: a part is missing or corrupt" >&2; exit 2; }
    mkdir -p "$dest"
    cat "$src"/distilled.tgz.part-* | tar xzf - -C "$dest"
    echo "unpacked $(tar tzf <(cat "$src"/distilled.tgz.part-*) | cut -d/ -f1 | sort -u | tr '\n' ' ')into $dest" ;;
  *) echo "usage: $0 pack|unpack SOURCE DESTINATION" >&2; exit 2 ;;
esac
