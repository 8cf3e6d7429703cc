#!/usr/bin/env bash
# Files kept across device sessions, whose machines keep nothing: distilled training data (about 4 device minutes to
# make again) and exported drafters (to continue training them with --init-from). What comes back through $OUT is at
# most 16 MiB a file and 64 MiB a call, so they travel as a tar in parts of at most 15 MiB, with a SHA256SUM:
#
#   bash bench/parts.sh pack /root/work /root/results/distilled distill task_data   # tar (gzip: COMPRESS=1,
#                                                                                   # the default) of these folders
#   bash bench/parts.sh send /root/results/distilled 4     # in a device call: the next 4 unsent parts (and the
#                                                           # SHA256SUM) into $OUT/distilled/
#   bash bench/parts.sh gather .stage/distilled /work/.device/{31..40}/distilled   # here: the parts of the last
#                                                           # folder's SHA256SUM, from the polls that brought them
#   bash bench/parts.sh unpack .stage/distilled /root/work  # checks every part against SHA256SUM, then untars
#
# .stage/ is ignored by git. Carry a gathered folder into a later session at most four parts a call.
set -euo pipefail
cmd=${1:?pack|send|unpack}
case "$cmd" in
  pack)
    root=${2:?root folder}; dest=${3:?destination folder}; shift 3
    [ $# -gt 0 ] || { echo "name the folders under $root to pack" >&2; exit 2; }
    for f in "$@"; do [ -e "$root/$f" ] || { echo "no $f in $root" >&2; exit 2; }; done
    rm -rf "$dest" "$dest.sent"; mkdir -p "$dest"
    z=z; [ "${COMPRESS:-1}" = 1 ] || z=""  # safetensors barely compress: COMPRESS=0 saves the gzip time
    tar "c${z}f" - -C "$root" "$@" | split -b "${PART_SIZE:-15M}" -d -a 3 - "$dest/part-"
    (cd "$dest" && sha256sum part-* > SHA256SUM)
    echo "packed $* into $(ls "$dest" | grep -c part-) parts ($(du -sh "$dest" | cut -f1)) in $dest" ;;
  send)
    src=${2:?packed folder}; n=${3:-4}; name=$(basename "$src")
    [ -f "$src/SHA256SUM" ] || { echo "$src has no SHA256SUM: nothing packed yet" >&2; exit 2; }
    mkdir -p "$src.sent" "${OUT:?}/$name"; cp "$src/SHA256SUM" "$OUT/$name/"
    sent=0
    for part in "$src"/part-*; do
      [ "$sent" -lt "$n" ] || break
      [ -e "$src.sent/$(basename "$part")" ] && continue
      cp "$part" "$OUT/$name/" && touch "$src.sent/$(basename "$part")" && sent=$((sent + 1))
    done
    left=$(( $(ls "$src" | grep -c part-) - $(ls "$src.sent" | wc -l) ))
    echo "sent $sent parts of $name ($left left)" ;;
  gather)  # here, after the polls: the parts of the last folder's SHA256SUM found in any of the folders given
    dest=${2:?destination folder}; shift 2
    [ $# -gt 0 ] && [ -f "${!#}/SHA256SUM" ] || { echo "the last folder given must hold a SHA256SUM" >&2; exit 2; }
    rm -rf "$dest"; mkdir -p "$dest"; cp "${!#}/SHA256SUM" "$dest/"
    for folder in "$@"; do
      for part in "$folder"/part-*; do
        [ -e "$part" ] || continue
        grep -qx "$(sha256sum "$part" | cut -d' ' -f1)  $(basename "$part")" "$dest/SHA256SUM" && cp "$part" "$dest/"
      done
    done
    missing=$(cd "$dest" && awk '{print $2}' SHA256SUM | while read -r f; do [ -e "$f" ] || echo "$f"; done)
    [ -z "$missing" ] || { echo "$dest lacks $(echo $missing | wc -w) parts: $(echo $missing)" >&2; exit 2; }
    echo "gathered $(ls "$dest" | grep -c part-) parts into $dest" ;;
  unpack)
    src=${2:?parts folder}; dest=${3:?destination folder}
    [ -f "$src/SHA256SUM" ] || { echo "$src has no SHA256SUM: not a folder written by '$0 pack'" >&2; exit 2; }
    (cd "$src" && sha256sum --quiet -c SHA256SUM) || { echo "$src: a part is missing or corrupt" >&2; exit 2; }
    mkdir -p "$dest"
    z=""; [ "$(head -c 2 "$(ls "$src"/part-* | head -n 1)" | od -An -tx1 | tr -d ' ')" = 1f8b ] && z=z  # gzip magic
    cat "$src"/part-* | tar "x${z}f" - -C "$dest"
    echo "unpacked $src into $dest" ;;
  *) echo "usage: $0 pack ROOT DEST FOLDER... | send PACKED [N] | gather DEST FOLDER... | unpack PARTS DEST" >&2
     exit 2 ;;
esac
