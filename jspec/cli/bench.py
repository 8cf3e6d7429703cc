"""`jspec bench` (methods × datasets: MAT, tok/s, speedup over vanilla) and `jspec report` (merge bench runs)."""

import pathlib
import shlex
import time

from jspec.bench.datasets import DATASETS
from jspec.cli.args import positive_int, resolve_dtype
from jspec.cli.options import (add_domino_arguments, add_tail_arguments, drafter_placeholder, tail_options,
                               tr_tree_option)
from jspec.errors import UserError


def add_bench_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="benchmark methods on datasets (MAT, tok/s, speedup vs vanilla)")
    bench.add_argument("--model", default="smollm2-135m")
    bench.add_argument("--methods", default="vanilla,pld", help="comma-separated; vanilla is always run first; "
                       "graft_fixed is graft with a fixed split (--fixed-split), domino_topk is domino with "
                       "--candidates, domino_block is domino_topk as one persistent GPU kernel per block, "
                       "domino_block_stop is domino_block with --head-stop, "
                       "domino_headless is the --domino-drafter's backbone alone (the head-off "
                       "ablation), draft_model_adaptive is draft_model with --draft-confidence, "
                       "draft_model_tree is draft_model with --draft-top-k, token_recycling_full is token_recycling "
                       "with the whole 81-slot template, token_recycling_tuned is token_recycling on --tr-tree")
    bench.add_argument("--dataset", default="humaneval", help="comma-separated: humaneval, gsm8k, mbpp, mtbench, "
                       "alpaca, xsum, sharegpt")
    bench.add_argument("--limit", type=positive_int("--limit"), default=20, help="prompts per dataset")
    bench.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=256)
    bench.add_argument("--temperature", type=float, default=0.0)
    bench.add_argument("--top-p", type=float, default=1.0)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--drafter", help="drafter for draft_model (model name/path or truncate:N)")
    bench.add_argument("--eagle3-drafter", help="EAGLE-3 checkpoint directory for eagle3, eagle3_pruned and graft")
    bench.add_argument("--dflash-drafter", help="DFlash (or Domino) checkpoint directory for dflash and graft_tail")
    bench.add_argument("--domino-drafter", help="Domino checkpoint directory for domino (and graft_tail when "
                       "--dflash-drafter is not given)")
    bench.add_argument("--fixed-split", type=positive_int("--fixed-split"), default=40, metavar="K",
                       help="draft nodes of the graft_fixed method (graft without adaptive pruning: K draft nodes "
                       "every step, the rest retrieved)")
    add_domino_arguments(bench, "domino_topk and domino_block (their GRU inputs from a precomputed table)",
                          candidates=32)
    bench.add_argument("--xla-select", action="store_true",
                       help="domino_block: select the candidates with XLA's sorts instead of the selection kernel")
    bench.add_argument("--head-stop", type=float, default=None, metavar="P",
                       help="domino_block_stop: stop the head once the running product of its drafts' candidate "
                       "probabilities falls below P (default: 0.05)")
    bench.add_argument("--draft-confidence", type=float, default=0.5, metavar="P",
                       help="draft_model_adaptive: stop the chain after a draft the drafter gives probability < P")
    bench.add_argument("--draft-top-k", type=positive_int("--draft-top-k"), default=3, metavar="K",
                       help="draft_model_tree: a 16-slot dynamic tree with K children per node")
    add_tail_arguments(bench)
    bench.add_argument("--tr-tree", metavar="FILE", help="tree of token_recycling_tuned: a tree file from `jspec "
                       "calibrate --tree-out` or bench/tr_node_stats.py, or a file of rank paths (\"0 1 00 ...\")")
    bench.add_argument("--method-state", action="append", default=[], metavar="METHOD=PATH",
                       help="start every dataset of METHOD from a saved state (e.g. graft=calibrated.npz from "
                       "`jspec calibrate`); repeatable")
    bench.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    bench.add_argument("--out", required=True, help="output folder for results.jsonl, summary.md, summary.png")
    bench.set_defaults(run=run_bench)
    rep = sub.add_parser("report", help="merge `jspec bench` runs (e.g. one per GPU, split by dataset) into one "
                         "summary")
    rep.add_argument("runs", nargs="+", metavar="RUN", help="output folders of `jspec bench`")
    rep.add_argument("--out", required=True, help="folder for the merged results.jsonl, summary.md, summary.png")
    rep.set_defaults(run=run_report)


def run_bench(args) -> None:
    import jax

    from jspec.bench.report import write_report
    from jspec.bench.runner import BenchConfig, method_of, run
    from jspec.methods import get_method
    from jspec.models.loading import load_model
    from jspec.sampling import Sampling

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    for m in methods:
        get_method(method_of(m), **drafter_placeholder(method_of(m)))
    if "graft_fixed" in methods:
        get_method("graft", fixed_split=args.fixed_split)
    if {"domino_topk", "domino_block", "domino_block_stop"} & set(methods):
        get_method("domino", candidates=args.candidates)
    headed = {"domino", "domino_topk", "domino_block", "domino_block_stop"}  # labels drafting through Domino's head
    if args.head_drafts is not None and not headed & set(methods):
        raise UserError("--head-drafts applies to the domino, domino_topk, domino_block and domino_block_stop methods "
                        "only")
    head_stop = {} if args.head_stop is None else {"head_stop": args.head_stop}  # else BenchConfig's default
    if head_stop and "domino_block_stop" not in methods:
        raise UserError("--head-stop applies to the domino_block_stop method only")
    if "domino_block_stop" in methods:
        get_method("domino", candidates=args.candidates, head_stop=head_stop.get("head_stop", BenchConfig.head_stop))
    if "draft_model_adaptive" in methods:
        get_method("draft_model", min_confidence=args.draft_confidence)
    if "draft_model_tree" in methods:
        get_method("draft_model", top_k=args.draft_top_k)
    tail = tail_options(methods, args)
    if tail:
        get_method("graft_tail", **tail)
    tr_tree = tr_tree_option(args.tr_tree)
    if ("token_recycling_tuned" in methods) != bool(tr_tree):
        raise UserError("token_recycling_tuned and --tr-tree go together")
    if tr_tree:
        get_method("token_recycling", **tr_tree)
    method_states = []
    for spec in args.method_state:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--method-state takes METHOD=PATH, got {spec!r}")
        if name not in methods:
            raise UserError(f"--method-state names {name!r}, which is not among --methods")
        method_states.append((name, path))
    block_drafters = {"dflash": args.dflash_drafter, "domino": args.domino_drafter, "domino_topk": args.domino_drafter,
                      "domino_block": args.domino_drafter, "domino_block_stop": args.domino_drafter,
                      "domino_headless": args.domino_drafter, "graft_tail": args.dflash_drafter or args.domino_drafter}
    for m in set(methods) & set(block_drafters):
        if not block_drafters[m]:
            raise UserError(f"{m} needs a checkpoint directory: "
                            f"--{'domino' if m.startswith('domino') else 'dflash'}-drafter")
    datasets = tuple(d.strip() for d in args.dataset.split(",") if d.strip())
    for d in datasets:
        if d not in DATASETS:
            raise UserError(f"unknown dataset {d!r}; expected one of {', '.join(DATASETS)}")
    dtype = resolve_dtype(args.dtype)
    model = load_model(args.model, dtype=dtype)
    cfg = BenchConfig(methods=methods, datasets=datasets, limit=args.limit, max_new_tokens=args.max_new_tokens,
                      sampling=Sampling(temperature=args.temperature, top_p=args.top_p), seed=args.seed,
                      drafter=args.drafter, eagle3_drafter=args.eagle3_drafter, fixed_split=args.fixed_split,
                      candidates=args.candidates, candidate_chunk=args.candidate_chunk or 0,
                      select_kernel=not args.xla_select, full_block=args.full_block,
                      head_drafts=args.head_drafts or 0, **head_stop,
                      draft_confidence=args.draft_confidence,
                      draft_top_k=args.draft_top_k,
                      method_states=tuple(method_states), graft_tail_options=tuple(tail.items()),
                      dflash_drafter=args.dflash_drafter, domino_drafter=args.domino_drafter,
                      tr_tree=tr_tree.get("tree", ()))
    out = pathlib.Path(args.out)
    run(model, cfg, out)
    device = jax.devices()[0].device_kind
    header = (f"# jspec bench: {model.name} ({dtype}) on {device}, {time.strftime('%Y-%m-%d')}\n\n"
              f"`jspec {shlex.join(args.argv)}` (every option as given, the rest at its default), batch 1; "
              "speedup is measured against vanilla in the same run.")
    rows = write_report(out, header)
    width = max(len(row["method"]) for row in rows)
    for row in rows:
        print(f"{row['dataset']:10s} {row['method']:{width}s} MAT {row['mat']:.2f}  {row['tok_per_s']:8.1f} tok/s  "
              f"speedup {row['speedup']:.2f}x" + ("" if row["identical"] is None else
                                                   f"  identical {100 * row['identical']:.0f}%"))


def run_report(args) -> None:
    from jspec.bench.report import merge_runs

    merge_runs([pathlib.Path(r) for r in args.runs], pathlib.Path(args.out))
    print(f"jspec: merged {len(args.runs)} runs into {args.out}/summary.md")
