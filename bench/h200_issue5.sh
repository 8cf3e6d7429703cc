#!/usr/bin/env bash
# DFlash / Domino H200 figures on Qwen2.5-Coder-1.5B, after bench/h200_issue4.sh made the distilled data (and, for
# the bench step, the EAGLE-3 drafter and graft state). Settings: bench/h200_env.sh.
#
#   bash bench/h200_issue5.sh probe          # steps/s of the three trainers on a small distilled set -> rates.json
#   bash bench/h200_issue5.sh task-data      # answers to every prompt of each bench task past the bench's (LIMIT)
#                                            # -> $work/task_data/<task>; TASK_DATA=1 adds them to the training data
#   bash bench/h200_issue5.sh dflash         # DFlash drafter (= the "head off" ablation; INIT_LAYERS: --init-layers
#                                            # of both trainers; INIT_FROM=DIR: --init-from DIR/<run>/drafter;
#                                            # DFLASH_RUN: its run folder, default dflash, also the one bench,
#                                            # task-walk and ablation use; PLUS_DATA=DIR[,DIR]: more training-only
#                                            # data, e.g. the fresh answers for a baseline on every answer;
#                                            # LABELS=target: --labels target, soft labels, for every run;
#                                            # LR: --lr, the peak learning rate, for every run)
#   bash bench/h200_issue5.sh domino [tf_curriculum|tf_curriculum_half|tf_curriculum_floor|tf|ttt|
#                                     ttt_curriculum|frozen_backbone]
#                                            # Domino drafter (default: TF + curriculum; _half: λ at 0 half-way;
#                                            # _floor: λ falls to CURRICULUM_END, default 0.5, not 0;
#                                            # ttt: without it, as in the paper's ablation; frozen_backbone: the
#                                            # head alone on a trained backbone; CURRICULUM_START: λ at step 0;
#                                            # INIT_BACKBONE=DIR: --init-backbone DIR, e.g. a DFlash export;
#                                            # HEAD_RANK / GRU_HIDDEN: --rank / --gru-hidden of the head;
#                                            # HEAD_LR_SCALE: --head-lr-scale, the head's rate over --lr;
#                                            # DOMINO_NAME: the run folder, default domino_<variant>,
#                                            # e.g. a second head rate beside the first;
#                                            # POSITION_WEIGHTS=reach: --position-weights reach; a variant
#                                            # name + _fresh, e.g. frozen_backbone_fresh: trained on FRESH_DATA=
#                                            # DIR[,DIR] alone, --held-out-only; + _greedy: the same recipe, for
#                                            # h200_domino_relations.sh to train without the T = 1 answers; + _soft:
#                                            # with --labels target)
#   bash bench/h200_issue5.sh bench          # vanilla, dflash, domino, domino_topk, domino_block, graft_tail x 5 tasks
#                                            # (TEMP=1: vanilla, dflash, domino_block, graft_tail: drafts stay
#                                            # greedy, so the block kernel serves T > 0 too; METHODS, TASKS and
#                                            # BENCH_NAME, the output folder, override; CANDIDATES: the
#                                            # head's candidates, default 32; FULL_BLOCK=1: --full-block; CHUNK:
#                                            # --candidate-chunk; XLA_SELECT=1: --xla-select; HEAD_DRAFTS:
#                                            # --head-drafts; HEAD_STOP: --head-stop, the threshold of the
#                                            # domino_block_stop label (add it to METHODS); DOMINO_RUN: the
#                                            # Domino run folder, default domino_tf_curriculum)
#   bash bench/h200_issue5.sh task-walk      # after dflash and domino: bench/task_walk.py, the decode loop's MAT
#                                            # replayed over answers to each task's prompts past the bench's
#                                            # (LIMIT), both drafters (DOMINO_RUN as for bench; WALK_PROMPTS)
#   bash bench/h200_issue5.sh ablation       # domino variants (VARIANTS, comma-separated; and dflash when trained;
#                                            # TF + curriculum also with its head off: domino_headless) on gsm8k +
#                                            # humaneval
#   bash bench/h200_issue5.sh head-speed     # fused vs unfused Domino head at the 1.5B's shapes
#   bash bench/h200_issue5.sh block-check    # no GGUF needed: the persistent block kernel (barrier, agreement with
#                                            # the XLA loop, µs per block), line by line
#   bash bench/h200_issue5.sh costs          # verify(60) / decode step costs (donated cache)
#   bash bench/h200_issue5.sh profile        # no GGUF or training needed (random weights): step, propose and verify
#                                            # of dflash / domino / domino_topk / domino_block / domino_headless,
#                                            # with kernel tables (CANDIDATES, FULL_BLOCK, CHUNK, HEAD_DRAFTS,
#                                            # HEAD_STOP as for bench; XLA_SELECT=1: --xla-select; PROFILE_NAME:
#                                            # the output folder)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/h200_env.sh

variant_flags() {  # a recipe's trainer flags; NAME_fresh is NAME's recipe on FRESH_DATA (train_only), NAME_greedy
  # NAME's recipe on the data h200_domino_relations.sh gives it (no T = 1 answers), NAME_soft NAME's recipe with soft
  # labels (--labels target)
  local recipe=${1%_fresh}; recipe=${recipe%_greedy}
  [ "$recipe" = "${recipe%_soft}" ] || { recipe=${recipe%_soft}; printf '%s ' --labels target; }
  case "$recipe" in
    tf_curriculum) echo "" ;;
    tf_curriculum_half) echo "--curriculum-fraction 0.5" ;;  # λ reaches 0 half-way (SpecForge's code default)
    tf_curriculum_floor) echo "--curriculum-end ${CURRICULUM_END:-0.5}" ;;  # the base loss keeps anchoring the backbone
    tf) echo "--no-curriculum" ;;
    ttt) echo "--ttt --no-curriculum" ;;  # the paper's TTT row
    ttt_curriculum) echo "--ttt" ;;
    frozen_backbone) echo "--freeze-backbone" ;;  # the head alone, on the INIT_BACKBONE / INIT_FROM backbone
    *) echo "unknown domino variant $1 (tf_curriculum|tf_curriculum_half|tf_curriculum_floor|tf|ttt|ttt_curriculum|\
frozen_backbone)" >&2
       exit 2 ;;
  esac
}

train_data() {  # the ShareGPT answers, and with TASK_DATA=1 the answers of `task-data` too
  local data="$work/distill"
  if [ "${TASK_DATA:-0}" = 1 ]; then for t in ${tasks//,/ }; do data+=",$work/task_data/$t"; done; fi
  echo "$data"
}

train_only() {  # answers to ShareGPT's later turns, when made: trained on, never held out (the held-out set stays
  # that of the runs without them, which a run started from one of those needs). fresh_only=1 (the _fresh
  # variants): train on the FRESH_DATA folders alone, scored on the same held-out records (--held-out-only;
  # answers the backbone never saw)
  if [ "${fresh_only:-0}" = 1 ]; then echo "--train-only-data ${FRESH_DATA:?FRESH_DATA} --held-out-only"; return; fi
  local extra=""; [ ! -d "$work/distill_followups" ] || extra=$work/distill_followups
  [ -z "${PLUS_DATA:-}" ] || extra=${extra:+$extra,}$PLUS_DATA  # PLUS_DATA=DIR[,DIR]: more, trained on too
  [ -z "$extra" ] || echo "--train-only-data $extra"
}
dflash_run=${DFLASH_RUN:-dflash}

train_drafter() {  # kind run_name extra_flags...
  local kind=$1 name=$2; shift 2
  local steps evals=${EVALS:-4}; steps=$(train_steps)  # EVALS: held-out evaluations in the run (the learning curve)
  echo "$name: $steps steps"
  python3 -m jspec.cli train "$kind" --model "$model" --data "$(train_data)" --out "$work/$name" --steps "$steps" \
    --warmup-steps "$(warmup_for "$steps")" $train_shape --eval-records "${EVAL_RECORDS:-64}" \
    --eval-every $(( steps / evals > 0 ? steps / evals : 1 )) --save-every 250 --resume \
    --time-limit "${TIME_LIMIT:-420}" ${INIT_LAYERS:+--init-layers $INIT_LAYERS} ${LABELS:+--labels $LABELS} \
    ${LR:+--lr $LR} $(train_only) \
    ${INIT_FROM:+--init-from $INIT_FROM/$name/drafter} "$@" 2>&1 | tee "$work/$name.log" | quiet 8
  # A finished run has exported its drafter; one stopped by the time limit (or lost) exports its latest checkpoint,
  # a second process that loads the target again
  if ! grep -q "jspec: exported" "$work/$name.log"; then
    python3 -m jspec.cli train "$kind" --model "$model" --data "$(train_data)" --out "$work/$name" --export "$@"
  fi
  mkdir -p "$out/$name" && cp "$work/$name"/{metrics.jsonl,run.json} "$out/$name/"
  cp "$work/$name"/*.png "$out/$name/" 2>/dev/null || true
}

case "${1:?probe|task-data|dflash|domino|bench|task-walk|ablation|head-speed|block-check|costs|profile}" in
  probe)
    rm -rf "$work/probe_data" "$work/probe"
    python3 -m jspec.cli train distill --model "$model" --out "$work/probe_data" --num-prompts "${PROBE_PROMPTS:-64}" \
      --max-prompt-tokens 512 --max-new-tokens 256 --batch-size 64 --shard-size 64 --dtype "$dtype" 2>&1 | quiet 2
    for kind in eagle3 dflash domino; do
      extra=""; [ "$kind" = eagle3 ] && extra="--draft-vocab-size $draft_vocab"
      python3 -m jspec.cli train "$kind" --model "$model" --data "$work/probe_data" --out "$work/probe/$kind" \
        --steps 1000 $train_shape $extra --eval-records 8 --eval-every 1000 --log-every 5 \
        --stop-at "${PROBE_STEPS:-25}" 2>&1 | quiet 2
    done
    python3 bench/train_rates.py "$work"/probe/{eagle3,dflash,domino} --out "$work/rates.json"
    cp "$work/rates.json" "$out/"
    echo "steps in ${TRAIN_SECONDS:-300} s: $(train_steps)" ;;
  task-data)  # one process: one model load and one compilation for every task
    dest=$work/task_data; [[ $tasks == *,* ]] || dest+="/$tasks"  # several datasets go to <out>/<dataset>
    python3 -m jspec.cli train distill --model "$model" --dataset "$tasks" --skip "${LIMIT:-20}" --num-prompts all \
      --max-prompt-tokens 1024 --max-new-tokens "${MAX_NEW:-256}" --batch-size "${DBATCH:-256}" \
      --shard-size "${DBATCH:-256}" --dtype "$dtype" \
      --out "$dest" 2>&1 | tr '\r' '\n' | grep -v '%|' | grep -v '^\s*$' | tail -n 8 ;;
  dflash)
    train_drafter dflash "$dflash_run" ;;
  domino)
    v=${2:-tf_curriculum}
    fresh_only=0; [ "$v" = "${v%_fresh}" ] || fresh_only=1
    [ "$fresh_only" = 0 ] || [ -n "${FRESH_DATA:-}" ] || { echo "domino $v needs FRESH_DATA=DIR[,DIR]" >&2; exit 2; }
    train_drafter domino "${DOMINO_NAME:-domino_$v}" $(variant_flags "$v") \
      ${CURRICULUM_START:+--curriculum-start $CURRICULUM_START} \
      ${INIT_BACKBONE:+--init-backbone $INIT_BACKBONE} ${HEAD_RANK:+--rank $HEAD_RANK} \
      ${GRU_HIDDEN:+--gru-hidden $GRU_HIDDEN} ${POSITION_WEIGHTS:+--position-weights $POSITION_WEIGHTS} \
      ${HEAD_LR_SCALE:+--head-lr-scale $HEAD_LR_SCALE} ;;
  bench)
    temp=${TEMP:-0}
    name=${BENCH_NAME:-bench5_t$temp}  # a run split over two GPUs by TASKS needs two names
    methods=vanilla,dflash,domino,domino_topk,domino_block,graft_tail
    [ "$temp" = 0 ] || methods=vanilla,dflash,domino_block,graft_tail
    python3 -m jspec.cli bench --model "$model" --methods "${METHODS:-$methods}" --temperature "$temp" \
      --dflash-drafter "$work/$dflash_run/drafter" \
      --domino-drafter "$work/${DOMINO_RUN:-domino_tf_curriculum}/drafter" \
      --candidates "${CANDIDATES:-32}" ${FULL_BLOCK:+--full-block} ${CHUNK:+--candidate-chunk $CHUNK} \
      ${XLA_SELECT:+--xla-select} ${HEAD_DRAFTS:+--head-drafts $HEAD_DRAFTS} ${HEAD_STOP:+--head-stop $HEAD_STOP} \
      --dataset "$tasks" $bench_size \
      --out "$out/$name" > "$out/$name.log" 2>&1 \
      || { tail -c 4000 "$out/$name.log"; exit 1; }
    cat "$out/$name/summary.md" ;;
  task-walk)
    timeout "${WALK_TIMEOUT:-480}" python3 bench/task_walk.py --model "$model" --drafter "$work/$dflash_run/drafter" \
      --drafter "$work/${DOMINO_RUN:-domino_tf_curriculum}/drafter" --tasks "$tasks" --skip "${LIMIT:-20}" \
      --prompts "${WALK_PROMPTS:-120}" --batch-size "${WALK_BATCH:-20}" --max-new-tokens "${MAX_NEW:-256}" \
      --dtype "$dtype" --out "$out/task_walk" 2>&1 | quiet 14 \
      || echo "task_walk FAILED (or timed out)" ;;
  ablation)
    VARIANTS=${VARIANTS:-tf_curriculum,tf,ttt}
    for v in ${VARIANTS//,/ }; do
      [ -d "$work/domino_$v/drafter" ] || { echo "skip $v: not trained"; continue; }
      methods=vanilla,domino; [ "$v" = tf_curriculum ] && methods+=,domino_headless  # head off, same model
      dflash=(--dflash-drafter "$work/$dflash_run/drafter")
      if [ -d "$work/$dflash_run/drafter" ]; then methods+=,dflash; else dflash=(); fi
      python3 -m jspec.cli bench --model "$model" --methods "$methods" --dataset gsm8k,humaneval \
        "${dflash[@]}" --domino-drafter "$work/domino_$v/drafter" $bench_size \
        --out "$out/ablation_$v" > "$out/ablation_$v.log" 2>&1 || { tail -c 3000 "$out/ablation_$v.log"; exit 1; }
      echo "## domino $v"; cat "$out/ablation_$v/summary.md"
    done
    folders=(); for v in ${VARIANTS//,/ }; do [ -f "$out/ablation_$v/results.jsonl" ] && folders+=("$out/ablation_$v"); done
    [ ${#folders[@]} -eq 0 ] || python3 bench/plot_ablation.py "${folders[@]}" --out "$out/ablation" ;;
  head-speed)
    python3 bench/domino_head_speed.py --hidden "${HEAD_HIDDEN:-1536}" --vocab "${HEAD_VOCAB:-151936}" \
      --batches 1 --out "$out/head_speed" ${HEAD_FLAGS:-} 2>&1 | tail -n 20 ;;
  block-check)
    mkdir -p "$out/block_check"
    timeout "${BLOCK_TIMEOUT:-300}" python3 bench/block_kernel_check.py --out "$out/block_check" ${BLOCK_FLAGS:-} 2>&1 \
      | grep --line-buffered -v Warning | tee "$out/block_check/log.txt" \
      || echo "block_kernel_check FAILED (or timed out)" ;;
  costs)
    python3 bench/step_breakdown.py --model "$model" --dtype "$dtype" --methods token_recycling \
      --contexts 2048,8192 --out "$out/costs" 2>&1 | tail -n 4 ;;
  profile)
    timeout 540 python3 bench/step_breakdown.py --model "$model" --weights random --dtype "$dtype" \
      --methods "${METHODS:-dflash,domino,domino_topk,domino_block,domino_headless}" --dflash-drafter random \
      --domino-drafter random --candidates "${CANDIDATES:-32}" ${FULL_BLOCK:+--full-block} \
      ${CHUNK:+--candidate-chunk $CHUNK} ${XLA_SELECT:+--xla-select} ${HEAD_DRAFTS:+--head-drafts $HEAD_DRAFTS} \
      ${HEAD_STOP:+--head-stop $HEAD_STOP} --contexts 300 \
      --parts decode,step,propose,verify --profile --reps 5 \
      --out "$out/${PROFILE_NAME:-profile}" 2>&1 | tail -n 8 || echo "step_breakdown FAILED (or timed out)" ;;
esac
