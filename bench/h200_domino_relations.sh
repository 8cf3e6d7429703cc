#!/usr/bin/env bash
# Issue 5's goal relations on ONE GPU, in two parts, each started under setsid so that it runs across device calls:
#
#   setsid nohup bash bench/h200_domino_relations.sh head > /root/head.log 2>&1 < /dev/null &
#       no GGUF needed (run it while the model chunks are staged): the candidate top-k by method at each k of
#       TOPK_KS (default 32), then random-weight step profiles of domino_block, one per ';'-separated set of
#       VAR=VALUE words in PROFILES (default "CANDIDATES=32; CANDIDATES=32 HEAD_DRAFTS=8; CANDIDATES=32
#       HEAD_DRAFTS=6": the whole head, then the head on the first 8 or 6 drafts only), the first also of dflash and
#       domino_headless (the head's cost is the domino_block step minus the domino_headless step). Touches
#       $RESULTS/head.done.
#   setsid nohup bash bench/h200_domino_relations.sh train-profile > /root/tp.log 2>&1 < /dev/null &
#       no GGUF needed either: bench/train_profile.py (random weights, the trainers' default shape: 16 x 1024, 5
#       layers, 128 anchors a row) for KINDS (default dflash,domino,eagle3): ms per step, split into the target's
#       forward, the whole forward and the backward, and a kernel table per trainer. Touches
#       $RESULTS/train-profile.done.
#   setsid nohup bash bench/h200_domino_relations.sh train-bench > /root/tb.log 2>&1 < /dev/null &
#       after `bash bench/h200_issue3.sh setup` (MODELS=qwen2.5-coder-1.5b), and after `head` when both run
#       (WAIT_FOR=$RESULTS/head.done): the training data of `data` (below), DFlash and Domino (TF + curriculum) at
#       STEPS each on that data, then the 5-task bench of vanilla, dflash, domino_block and graft_tail at the first
#       of CANDIDATES_LIST, and vanilla + domino_block at the
#       others (BENCH_ENV: more VAR=VALUE words for every bench, e.g. CHUNK=128;
#       BENCH_METHODS: the first bench's methods; DOMINO_VARIANT: the Domino recipe of `h200_issue5.sh domino`,
#       default tf_curriculum; DOMINO_VARIANTS=a,b trains each and benches the one with the highest held-out walk
#       MAT, bench/best_walk.py). Each finished training run ends with its held-out walk (metrics.jsonl "walk"); with
#       TASK_WALK=1 (the default) the pair is then walked over answers to each task's prompts past the bench's
#       (`h200_issue5.sh task-walk`, about 3 minutes) before the bench. TASK_DATA=1 trains on those answers too
#       (`h200_issue5.sh task-data`; no task walk then).
#       Continued training across sessions: SEND_DRAFTERS=1 packs each exported drafter as soon as it exists,
#       DFlash into $RESULTS/drafters_dflash, the chosen Domino into $RESULTS/drafters_domino (bench/parts.sh;
#       h200_snapshot.sh sends four parts a poll, so DFlash's travel during Domino's training), and
#       INIT_FROM=FOLDER,FOLDER (those parts, carried in a later session) starts both runs from them (--init-from;
#       with DFlash's parts only, Domino's backbone starts as that DFlash drafter, --init-backbone, its head fresh;
#       CURRICULUM_START: Domino's λ at step 0, below 1 for a head that is already trained or a backbone that
#       is). TRAIN_DFLASH=0 benches the carried DFlash drafter as it is. DOMINO_VARIANTS=frozen_backbone trains a
#       Domino head alone on the DFlash drafter of the bench, carried or trained in the run (Domino = that drafter +
#       a head). Such a head's backbone is its DFlash drafter bit for bit (bench/domino_head.py): SEND_DRAFTERS=1
#       packs the head alone into $RESULTS/drafters_domino_head (7 parts instead of 38; `domino_head.py join` with
#       the DFlash drafter here rebuilds the whole), and INIT_FROM may carry the frozen-backbone Domino without
#       DFlash's parts (its backbone is then the DFlash drafter). Without INIT_FROM, the draft layers
#       start as copies of the target's (INIT_LAYERS, default target; random for the older sessions' start).
#       DOMINO_STEPS: the Domino variants' steps, when not STEPS. BENCH=0 skips the benches (train and pack only, when a
#       session's device time is short). FRESH=1 first distills answers that share no conversation with the training
#       data (`jspec train distill --after`: ShareGPT's first and later turns past the records it used, and MBPP, which
#       no bench task is; FRESH_PROMPTS of each, default all), packed into $RESULTS/fresh_data (carried back in through
#       DISTILLED as `fresh`); a variant named with _fresh, e.g. DOMINO_VARIANTS=frozen_backbone,frozen_backbone_fresh,
#       trains on those alone (--held-out-only: scored on the usual held-out records), the other on the training data,
#       over one backbone; the question is whether a backbone that memorised its training answers leaves the head too
#       little to learn from there (session 32; session 33: yes). CROSSFIT=1 (with FRESH=1) then trains the fair
#       baseline of such a head, DFlash from the target's layers on the training and the fresh answers both,
#       CROSSFIT_STEPS steps (run dflash_all), and the task walk and the benches compare Domino with it. ALL_DATA=1
#       (with FRESH=1) instead adds the fresh answers to every run's training data (PLUS_DATA), so that DFlash and a
#       jointly trained Domino can read every answer about once (the paper's regime, where neither memorises; with
#       FOLLOWUPS=N, the later turns of the training data's own conversations too). SAMPLED=N (with ALL_DATA=1) adds N
#       sets of answers sampled at T = 1 (seeds 1 .. N) to FRESH's prompts, once every ShareGPT prompt is used: new
#       tokens from prompts no held-out record shares a conversation with, packed into $RESULTS/sampled_data (carried
#       back in through DISTILLED; a seed carried in is not made again, and only the new seeds are packed); a
#       variant named with _greedy, e.g. DOMINO_VARIANTS=frozen_backbone,frozen_backbone_greedy, trains without them
#       (the greedy answers only), over the same DFlash drafter, and one named with _soft on soft labels (the
#       target's distributions, --labels target; LABELS=target: every run).
#       FAIR_DFLASH_STEPS=N: the data-fair baseline of a head trained on answers its DFlash backbone never read
#       (SAMPLED's later seeds): that DFlash drafter continued N steps on the same data (run dflash_fair), which the
#       task walk and the benches compare Domino with instead. CONTINUE_AS=VARIANT (with INIT_FROM holding a
#       frozen-backbone Domino's parts) starts DOMINO_VARIANTS' VARIANT from that Domino, so that a joint recipe
#       (e.g. tf_curriculum_floor_soft, CURRICULUM_START=CURRICULUM_END=0.5) trains its backbone the same steps as
#       dflash_fair: the steps-fair pair. TRANSFER_HEAD=1 (with FAIR_DFLASH_STEPS and such a Domino) also benches
#       the carried head as it is on dflash_fair (bench/domino_head.py head, then join; run domino_transfer,
#       bench5_transfer): whether a head survives its backbone's further training. SEND_FAIR=1 packs dflash_fair's
#       drafter into $RESULTS/drafters_dflash as dflash/drafter (32 parts), so that a later session continues both
#       chains (INIT_FROM=that folder,the Domino's; TRAIN_DFLASH=0 FAIR_DFLASH_STEPS=N, the Domino variant by name).
#       DOMINO_ON_DFLASH=1 starts every Domino variant's backbone as this run's DFlash drafter (--init-backbone, the
#       head fresh), so that with FAIR_DFLASH_STEPS=DOMINO_STEPS one session forks one DFlash drafter into the
#       steps-fair pair: a joint Domino and DFlash, each continued the same steps, with nothing carried in.
#       BASE_ONLY=1 (with SEND_DRAFTERS=1) stops once that DFlash drafter is packed into drafters_dflash: a short
#       session makes a fork's base, which later forks carry in (INIT_FROM, TRAIN_DFLASH=0) instead of training.
#       FAIR_FROM=FOLDER carries that fork's DFlash continued in as well (parts of dflash/drafter, as SEND_FAIR=1
#       packs it; they may still be arriving while Domino trains: it waits up to FAIR_WAIT s, default 900, for their
#       SHA256SUM), run dflash_fair, the DFlash drafter the benches compare with, instead of FAIR_DFLASH_STEPS'
#       training it again: with the same base carried in, a later fork trains only its Domino branch.
#       HEAD_LR_SCALES=X,Y trains each Domino variant once per head rate (HEAD_LR_SCALE of h200_issue5.sh; runs
#       domino_<variant>_lrX), and the benches take every run: the one with the highest held-out walk MAT as above,
#       each other one against DFlash in a bench of its own, bench5_<run>, without vanilla.
#       Touches $RESULTS/train-bench.done.
#   setsid nohup bash bench/h200_domino_relations.sh bench > /root/bench.log 2>&1 < /dev/null &
#       drafters carried in from earlier sessions benched as they are, no training: INIT_FROM=DFLASH_PARTS,DOMINO_PARTS
#       (bench/parts.sh folders: dflash/drafter and $DOMINO_RUN/drafter, default domino_frozen_backbone; a
#       frozen_backbone run's parts alone will do, DFlash being its backbone), the 5-task
#       bench of BENCH_METHODS (default vanilla,dflash,domino_block_stop,graft_tail) at the first of CANDIDATES_LIST;
#       BENCH_ENV as for train-bench (e.g. TEMP=1). Touches $RESULTS/bench.done.
#   setsid nohup bash bench/h200_domino_relations.sh data > /root/data.log 2>&1 < /dev/null &
#       the training data alone: PROMPTS ShareGPT answers (DISTILL_SKIP: past the first ones), with FOLLOWUPS=N|all
#       answers to N of ShareGPT's later user turns after their history (up to 768 prompt tokens), and with
#       TASK_DATA=1 the tasks' answers, each packed as soon as it exists into $RESULTS/distilled,
#       $RESULTS/distilled_followups and $RESULTS/task_data for later sessions (h200_snapshot.sh sends the parts).
#       DISTILLED=FOLDER[,FOLDER] unpacks such parts carried in from earlier sessions instead (2-6 minutes less);
#       what they lack is made. Touches $RESULTS/data.done.
set -uo pipefail
cd "$(dirname "$0")/.."
results=${RESULTS:-/root/results}
work=${WORK:-/root/work}
candidates=${CANDIDATES_LIST:-32}
mkdir -p "$results/issue5"

# Answers to the tasks' later prompts, as training data: the task walk would then score trained-on answers.
task_data=${TASK_DATA:-0}; task_walk=${TASK_WALK:-1}

make_data() {  # $work/distill, and $work/task_data with TASK_DATA=1: unpacked from DISTILLED (comma-separated
  # bench/parts.sh folders carried in from earlier sessions), else made, each packed as soon as it exists
  # ($RESULTS/distilled, $RESULTS/task_data) so that polls send it back even if the machine is lost later
  local parts list=${DISTILLED:-}
  for parts in ${list//,/ }; do bash bench/parts.sh unpack "$parts" "$work" || return 1; done
  if [ ! -d "$work/distill" ]; then
    bash bench/h200_gpu.sh 0 "issue4 sharegpt; PROMPTS=${PROMPTS:-5120} issue4 distill" || return 1
    bash bench/parts.sh pack "$work" "$results/distilled" distill
  fi
  if [ -n "${FOLLOWUPS:-}" ] && [ ! -d "$work/distill_followups" ]; then  # answers to ShareGPT's later turns
    bash bench/h200_gpu.sh 0 "issue4 sharegpt; TURNS=followups MAX_PROMPT=768 PROMPTS=$FOLLOWUPS \
DISTILL_DIR=$work/distill_followups issue4 distill" || return 1
    bash bench/parts.sh pack "$work" "$results/distilled_followups" distill_followups
  fi
  if [ "$task_data" = 1 ] && [ ! -d "$work/task_data" ]; then
    bash bench/h200_gpu.sh 0 "issue5 task-data" || return 1
    bash bench/parts.sh pack "$work" "$results/task_data" task_data
  fi
  if [ "${FRESH:-0}" = 1 ] && [ ! -d "$work/fresh" ]; then  # answers no drafter above trained on (FRESH below)
    local after=$work/distill; [ ! -d "$work/distill_followups" ] || after+=",$work/distill_followups"
    local fresh_prompts=${FRESH_PROMPTS:-all}  # of each set (a CPU dry run takes a few)
    bash bench/h200_gpu.sh 0 "issue4 sharegpt; \
AFTER=$after PROMPTS=$fresh_prompts DISTILL_DIR=$work/fresh/first issue4 distill; \
AFTER=$after TURNS=followups MAX_PROMPT=768 PROMPTS=$fresh_prompts DISTILL_DIR=$work/fresh/followups issue4 distill; \
DATASET=mbpp PROMPTS=$fresh_prompts DISTILL_DIR=$work/fresh/mbpp issue4 distill" || return 1
    bash bench/parts.sh pack "$work" "$results/fresh_data" fresh
  fi
  if [ "${SAMPLED:-0}" -gt 0 ]; then  # more answers once every prompt is used (below); seeds carried in are kept
    local after=$work/distill k items="" made=()
    [ ! -d "$work/distill_followups" ] || after+=",$work/distill_followups"
    for k in $(seq 1 "$SAMPLED"); do
      [ ! -d "$work/sampled/s$k" ] || continue
      items+="; DISTILL_TEMP=1 DISTILL_SEED=$k AFTER=$after PROMPTS=${FRESH_PROMPTS:-all} \
DISTILL_DIR=$work/sampled/s$k/first issue4 distill"
      items+="; DISTILL_TEMP=1 DISTILL_SEED=$k AFTER=$after TURNS=followups MAX_PROMPT=768 \
PROMPTS=${FRESH_PROMPTS:-all} DISTILL_DIR=$work/sampled/s$k/followups issue4 distill"
      items+="; DISTILL_TEMP=1 DISTILL_SEED=$k DATASET=mbpp PROMPTS=${FRESH_PROMPTS:-all} \
DISTILL_DIR=$work/sampled/s$k/mbpp issue4 distill"
      made+=("sampled/s$k")
    done
    if [ ${#made[@]} -gt 0 ]; then  # only the new seeds: the carried ones are in git already
      bash bench/h200_gpu.sh 0 "issue4 sharegpt$items" || return 1
      bash bench/parts.sh pack "$work" "$results/sampled_data" "${made[@]}"
    fi
  fi
}

sampled_dirs() {  # the SAMPLED answer folders, comma-separated
  local k dirs=""
  for k in $(seq 1 "${SAMPLED:-0}"); do
    dirs+=",$work/sampled/s$k/first,$work/sampled/s$k/followups,$work/sampled/s$k/mbpp"
  done
  echo "${dirs#,}"
}

case "${1:?head|train-profile|data|train-bench|bench}" in
  head)
    rm -f "$results/head.done"
    export JSPEC_HOME=${JSPEC_HOME:-/root/jspec_home} PYTHONPATH=/tmp/site:$PWD
    for k in ${TOPK_KS:-32}; do
      timeout 300 python3 bench/candidate_topk_speed.py --k "$k" --out "$results/issue5/topk_k$k" 2>&1 \
        | grep -v Warning | tail -n 10
    done
    methods=dflash,domino_headless,domino_block
    IFS=';' read -ra sets <<< "${PROFILES:-CANDIDATES=32; CANDIDATES=32 HEAD_DRAFTS=8; CANDIDATES=32 HEAD_DRAFTS=6}"
    for set in "${sets[@]}"; do
      name=$(echo $set | tr ' =' '__')  # CANDIDATES=32 CHUNK=128 -> CANDIDATES_32_CHUNK_128
      bash bench/h200_gpu.sh 0 "$set PROFILE_NAME=profile_$name METHODS=$methods issue5 profile"
      methods=domino_block
    done
    touch "$results/head.done" ;;
  train-profile)
    rm -f "$results/train-profile.done"
    JSPEC_HOME=${JSPEC_HOME:-/root/jspec_home} PYTHONPATH=/tmp/site:$PWD timeout 900 python3 bench/train_profile.py \
      --model qwen2.5-coder-1.5b --kinds "${KINDS:-dflash,domino,eagle3}" --profile \
      --out "$results/issue5/train_profile" 2>&1 | grep -v Warning | tail -n 8
    touch "$results/train-profile.done" ;;
  data)  # the training data alone, packed for later sessions (when a session's device time is short)
    rm -f "$results/data.done"
    rm -rf "$work/distill" "$work/distill_followups" "$work/task_data"
    make_data || exit 1
    touch "$results/data.done" ;;
  train-bench)
    rm -f "$results/train-bench.done"
    while [ -n "${WAIT_FOR:-}" ] && [ ! -e "$WAIT_FOR" ]; do sleep 5; done
    # A device machine can keep an earlier session's files, and training resumes from checkpoints it finds.
    # DOMINO_VARIANTS=a,b trains each recipe; the bench then takes the one with the highest held-out walk MAT
    variants=${DOMINO_VARIANTS:-${DOMINO_VARIANT:-tf_curriculum}}
    rm -rf "$work/distill" "$work/distill_followups" "$work/task_data" "$work/dflash" "$work/dflash_all" \
      "$work/dflash_fair" "$work/fair_init"
    rates=${HEAD_LR_SCALES:-}  # HEAD_LR_SCALES=X,Y: each variant once per head rate, run domino_<variant>_lrX
    for variant in ${variants//,/ }; do rm -rf "$work/domino_$variant" "$work/domino_${variant}_lr"*; done
    if [ -n "$rates" ] && [ -n "${HEAD_LR_SCALE:-}" ]; then
      echo "HEAD_LR_SCALES=$rates trains one run per head rate, HEAD_LR_SCALE=$HEAD_LR_SCALE gives every run one:" \
        "pick one" >&2; exit 2
    fi
    if [ -n "${FAIR_FROM:-}" ] && { [ -n "${FAIR_DFLASH_STEPS:-}" ] || [ "${CROSSFIT:-0}" = 1 ]; }; then
      echo "FAIR_FROM carries in the DFlash drafter the benches compare with; FAIR_DFLASH_STEPS and CROSSFIT=1" \
        "train one: pick one" >&2; exit 2
    fi
    [ "$task_data" = 1 ] && task_walk=0
    if [[ ",$variants," == *_fresh,* ]] && [ "${FRESH:-0}" != 1 ]; then
      echo "the _fresh variants ($variants) train on FRESH=1's data: set FRESH=1" >&2; exit 2
    fi
    if [[ ",$variants," == *_greedy,* ]] && [ "${SAMPLED:-0}" = 0 ]; then
      echo "the _greedy variants ($variants) leave out SAMPLED=N's answers: set SAMPLED" >&2; exit 2
    fi
    if [ "${SAMPLED:-0}" != 0 ] && [ "${ALL_DATA:-0}" != 1 ]; then
      echo "SAMPLED=N answers are trained on with ALL_DATA=1: set it (and FRESH=1)" >&2; exit 2
    fi
    if [ "${ALL_DATA:-0}" = 1 ] && [ "${FRESH:-0}" != 1 ]; then
      echo "ALL_DATA=1 trains every run on FRESH=1's answers too: set FRESH=1" >&2; exit 2
    fi
    if [ "${CROSSFIT:-0}" = 1 ] && { [ "${FRESH:-0}" != 1 ] || [ -z "${CROSSFIT_STEPS:-}" ]; }; then
      echo "CROSSFIT=1 trains DFlash on the training and the fresh answers: set FRESH=1 and CROSSFIT_STEPS" >&2; exit 2
    fi
    if [ "${BASE_ONLY:-0}" = 1 ] && { [ "${SEND_DRAFTERS:-0}" != 1 ] || [ "${SEND_FAIR:-0}" = 1 ] ||
        [ "${TRAIN_DFLASH:-1}" = 0 ]; }; then
      echo "BASE_ONLY=1 trains DFlash and sends it back: set SEND_DRAFTERS=1, and neither SEND_FAIR=1 nor" \
        "TRAIN_DFLASH=0" >&2; exit 2
    fi
    if [ -n "${FAIR_DFLASH_STEPS:-}" ] && [ "${CROSSFIT:-0}" = 1 ]; then
      echo "FAIR_DFLASH_STEPS and CROSSFIT=1 each train the DFlash drafter the benches compare with: pick one" >&2
      exit 2
    fi
    fresh_dirs=$work/fresh/first,$work/fresh/followups,$work/fresh/mbpp
    make_data || exit 1
    init=""; layers=${INIT_LAYERS:-target}  # copies of the target's last layers: session 26, walk MAT 1.58 -> 1.99
    if [ -n "${INIT_FROM:-}" ]; then  # drafters exported by an earlier session, carried in as parts: train on
      rm -rf "$work/init"
      for parts in ${INIT_FROM//,/ }; do bash bench/parts.sh unpack "$parts" "$work/init" || exit 1; done
      init="INIT_FROM=$work/init"; layers=random  # the carried weights are the start
    fi
    carried_head=$(ls -d "$work"/init/domino_frozen_backbone*/drafter 2>/dev/null | head -n 1)  # a head on DFlash
    if [ -n "${CONTINUE_AS:-}" ]; then  # that head and its backbone continue as one Domino of a joint recipe
      [ -n "$carried_head" ] || { echo "CONTINUE_AS needs a frozen-backbone Domino's parts in INIT_FROM" >&2; exit 2; }
      mkdir -p "$work/init/domino_$CONTINUE_AS" && cp -r "$carried_head" "$work/init/domino_$CONTINUE_AS/"
    fi
    train="TASK_DATA=$task_data INIT_LAYERS=$layers STEPS=${STEPS:?STEPS}"
    train+=" TIME_LIMIT=${TIME_LIMIT:-900} ${CURRICULUM_START:+CURRICULUM_START=$CURRICULUM_START}"
    plus=$fresh_dirs; [ "${SAMPLED:-0}" = 0 ] || plus+=",$(sampled_dirs)"
    [ "${ALL_DATA:-0}" = 1 ] && train+=" PLUS_DATA=$plus"  # one pass over every answer: nothing memorised
    if [ "${TRAIN_DFLASH:-1}" = 0 ]; then  # the carried DFlash drafter is the one benched, as it is
      if [ ! -d "$work/init/dflash/drafter" ]; then  # a head carried alone on its frozen backbone: that is DFlash
        [ -n "$carried_head" ] || { echo "TRAIN_DFLASH=0 needs DFlash's parts (or a frozen-backbone Domino's) in \
INIT_FROM" >&2; exit 2; }
        python3 bench/domino_head.py backbone "$carried_head" "$work/init/dflash/drafter" || exit 1
      fi
      rm -rf "$work/dflash"; mkdir -p "$work/dflash"; cp -r "$work/init/dflash/drafter" "$work/dflash/"
    else
      bash bench/h200_gpu.sh 0 "$train $init issue5 dflash"
      # for --init-from in a later session: 0.5 GB, sent while Domino trains; with SEND_FAIR=1 the continued drafter
      # goes back under that name instead
      if [ "${SEND_DRAFTERS:-0}" = 1 ] && [ "${SEND_FAIR:-0}" != 1 ]; then
        COMPRESS=0 bash bench/parts.sh pack "$work" "$results/drafters_dflash" dflash/drafter
      fi
      if [ "${BASE_ONLY:-0}" = 1 ]; then touch "$results/train-bench.done"; exit 0; fi  # a fork's base, for later
    fi
    steps="" runs=()
    for variant in ${variants//,/ }; do
      # A _fresh variant trains on answers its backbone never saw (FRESH=1), scored on the usual held-out records
      fresh=""; [ "$variant" = "${variant%_fresh}" ] || fresh="FRESH_DATA=$fresh_dirs"
      # A _greedy variant trains on the greedy answers alone (PLUS_DATA without SAMPLED's): whether the T = 1
      # answers that strengthen DFlash dilute what a head learns (session 40)
      vtrain=${train/STEPS=$STEPS/STEPS=${DOMINO_STEPS:-$STEPS}}
      [ "$variant" = "${variant%_greedy}" ] || vtrain=${vtrain/PLUS_DATA=$plus/PLUS_DATA=$fresh_dirs}
      recipe=${variant%_fresh}; recipe=${recipe%_greedy}; recipe=${recipe%_soft}
      rate_list=${rates//,/ }
      for rate in ${rate_list:-.}; do  # '.': the one run, at HEAD_LR_SCALE's rate (or the default)
        name=domino_$variant rated=""
        [ "$rate" = . ] || { name+=_lr$rate; rated="HEAD_LR_SCALE=$rate DOMINO_NAME=$name"; }
        # A carried Domino continues; without one, Domino's backbone starts as the carried DFlash drafter (its head
        # fresh), so both backbones have had the same steps. A fresh head alone (frozen_backbone) sits on the DFlash
        # drafter the bench compares it with: the carried one, or the one trained above.
        start=$init
        if [ -n "$init" ] && [ -d "$work/init/$name/drafter" ]; then
          :
        elif [ "$recipe" = frozen_backbone ] || [ "${DOMINO_ON_DFLASH:-0}" = 1 ]; then
          start="INIT_FROM= INIT_LAYERS= INIT_BACKBONE=$work/dflash/drafter"  # the backbone is the start
        elif [ -n "$init" ]; then
          start="INIT_FROM= INIT_BACKBONE=$work/init/dflash/drafter"  # INIT_FROM= : not the carried folders
        fi
        steps+="$vtrain $start $fresh $rated issue5 domino $variant; "
        runs+=("$work/$name")
      done
    done
    bash bench/h200_gpu.sh 0 "$steps"
    best=$(python3 bench/best_walk.py "${runs[@]}") || best=$(basename "${runs[0]}")  # its table goes to the log
    echo "bench takes $best"
    # packed before any baseline trains, so that its parts go back while that one does
    if [ "${SEND_DRAFTERS:-0}" = 1 ]; then  # the head alone when its backbone is DFlash's (2 polls), else 0.6 GB (10)
      if [[ $best == domino_frozen_backbone* ]] && python3 bench/domino_head.py head "$work/$best/drafter" \
          "$work/dflash/drafter" "$work/${best}_head"; then
        COMPRESS=0 bash bench/parts.sh pack "$work" "$results/drafters_domino_head" "${best}_head"
      else
        COMPRESS=0 bash bench/parts.sh pack "$work" "$results/drafters_domino" "$best/drafter"
      fi
    fi
    bench_dflash=""
    if [ "${CROSSFIT:-0}" = 1 ]; then  # the baseline of a head on fresh answers over a backbone that never saw
      # them: DFlash trained from the target's layers on both sets, the one the benches compare Domino with
      bash bench/h200_gpu.sh 0 "${train/STEPS=$STEPS/STEPS=$CROSSFIT_STEPS} INIT_FROM= INIT_LAYERS=target \
DFLASH_RUN=dflash_all PLUS_DATA=$fresh_dirs issue5 dflash"
      bench_dflash=DFLASH_RUN=dflash_all
    fi
    if [ -n "${FAIR_DFLASH_STEPS:-}" ]; then  # the data-fair baseline of a head that read answers its backbone
      # never did: that DFlash drafter continued on every run's data (PLUS_DATA included) for FAIR_DFLASH_STEPS steps,
      # the one the benches then compare Domino with; Domino keeps the backbone it was trained on
      mkdir -p "$work/fair_init/dflash_fair" && cp -r "$work/dflash/drafter" "$work/fair_init/dflash_fair/"
      bash bench/h200_gpu.sh 0 "${train/STEPS=$STEPS/STEPS=$FAIR_DFLASH_STEPS} INIT_FROM=$work/fair_init \
INIT_LAYERS=random DFLASH_RUN=dflash_fair issue5 dflash"
      bench_dflash=DFLASH_RUN=dflash_fair
      if [ "${SEND_FAIR:-0}" = 1 ]; then  # the continued drafter as dflash/drafter, the name INIT_FROM continues
        rm -rf "$work/fair_export" && mkdir -p "$work/fair_export/dflash" &&
          cp -r "$work/dflash_fair/drafter" "$work/fair_export/dflash/" &&
          COMPRESS=0 bash bench/parts.sh pack "$work/fair_export" "$results/drafters_dflash" dflash/drafter
      fi
      if [ "${TRANSFER_HEAD:-0}" = 1 ]; then  # the carried head, untrained further, on that continued DFlash drafter
        [ -n "$carried_head" ] || { echo "TRANSFER_HEAD=1 needs a frozen-backbone Domino's parts in INIT_FROM" >&2
          exit 2; }
        python3 bench/domino_head.py head "$carried_head" "$work/dflash/drafter" "$work/transfer_head" &&
          python3 bench/domino_head.py join "$work/dflash_fair/drafter" "$work/transfer_head" \
            "$work/domino_transfer/drafter" || exit 1
      fi
    fi
    if [ -n "${FAIR_FROM:-}" ]; then  # that baseline carried in instead: parts of dflash/drafter (e.g. an earlier
      # fork's DFlash continued, packed by SEND_FAIR=1), which may still be arriving while Domino trains; their
      # SHA256SUM comes with the last call
      waited=0
      until [ -f "$FAIR_FROM/SHA256SUM" ]; do
        [ "$waited" -lt "${FAIR_WAIT:-900}" ] || { echo "FAIR_FROM: no $FAIR_FROM/SHA256SUM after $waited s" >&2
          exit 2; }
        sleep 5; waited=$((waited + 5))
      done
      rm -rf "$work/fair_carried" && bash bench/parts.sh unpack "$FAIR_FROM" "$work/fair_carried" || exit 1
      [ -d "$work/fair_carried/dflash/drafter" ] || { echo "FAIR_FROM unpacked no dflash/drafter" >&2; exit 2; }
      mkdir -p "$work/dflash_fair" && mv "$work/fair_carried/dflash/drafter" "$work/dflash_fair/"
      bench_dflash=DFLASH_RUN=dflash_fair
    fi
    [ "$task_walk" = 1 ] && bash bench/h200_gpu.sh 0 "$bench_dflash DOMINO_RUN=$best issue5 task-walk"
    first=1 methods=${BENCH_METHODS:-vanilla,dflash,domino_block,graft_tail}
    [ "${BENCH:-1}" = 1 ] || candidates=""  # BENCH=0: train (and pack) only, when the session's device time is short
    for k in ${candidates//,/ }; do
      if [ "$first" = 1 ]; then
        bash bench/h200_gpu.sh 0 "${BENCH_ENV:-} $bench_dflash DOMINO_RUN=$best CANDIDATES=$k \
METHODS=$methods issue5 bench"
      else
        bash bench/h200_gpu.sh 0 "${BENCH_ENV:-} $bench_dflash DOMINO_RUN=$best CANDIDATES=$k \
METHODS=vanilla,domino_block \
BENCH_NAME=bench5_k$k \
issue5 bench"
      fi
      first=0
    done
    if [ -n "$rates" ] && [ -n "$candidates" ]; then  # a head-rate sweep benches every run: each of the others
      # against DFlash in a bench of its own (bench5_<run>; vanilla's speed is the first bench's)
      others=$(echo ",$methods," | sed 's/,vanilla,/,/; s/^,//; s/,$//')
      for run in "${runs[@]}"; do
        [ "$(basename "$run")" != "$best" ] || continue
        bash bench/h200_gpu.sh 0 "${BENCH_ENV:-} $bench_dflash DOMINO_RUN=$(basename "$run") \
CANDIDATES=${candidates%%,*} METHODS=$others BENCH_NAME=bench5_$(basename "$run") issue5 bench"
      done
    fi
    if [ -n "${candidates}" ] && [ -d "$work/domino_transfer/drafter" ]; then
      bash bench/h200_gpu.sh 0 "${BENCH_ENV:-} $bench_dflash DOMINO_RUN=domino_transfer CANDIDATES=${candidates%%,*} \
METHODS=vanilla,domino_block_stop BENCH_NAME=bench5_transfer issue5 bench"  # DFlash's MAT: bench5_t0's (T = 0)
    fi
    touch "$results/train-bench.done" ;;
  bench)
    rm -f "$results/bench.done"
    run=${DOMINO_RUN:-domino_frozen_backbone}
    rm -rf "$work/dflash" "$work/$run"
    : "${INIT_FROM:?INIT_FROM=DFLASH_PARTS,DOMINO_PARTS: bench/parts.sh folders of the drafters to bench}"
    for parts in ${INIT_FROM//,/ }; do bash bench/parts.sh unpack "$parts" "$work" || exit 1; done
    if [ ! -d "$work/dflash/drafter" ] && [[ $run == domino_frozen_backbone* ]] && [ -d "$work/$run/drafter" ]; then
      python3 bench/domino_head.py backbone "$work/$run/drafter" "$work/dflash/drafter" || exit 1  # DFlash = its base
    fi
    for d in dflash "$run"; do
      [ -d "$work/$d/drafter" ] || { echo "INIT_FROM unpacked no $d/drafter into $work" >&2; exit 2; }
    done
    methods=${BENCH_METHODS:-vanilla,dflash,domino_block_stop,graft_tail}
    bash bench/h200_gpu.sh 0 "${BENCH_ENV:-} DOMINO_RUN=$run CANDIDATES=${candidates%%,*} METHODS=$methods issue5 bench"
    touch "$results/bench.done" ;;
  *) echo "unknown part $1 (head|train-profile|data|train-bench|bench)" >&2; exit 2 ;;
esac
