"""`jspec calibrate`: warm a method's state (Graft's thresholds and matrix, Token Recycling's matrix, or a tree chosen
from accepted-node counts) on ShareGPT prompts and save it for `--method-state`."""

import json
import pathlib
import sys

from jspec.cli.args import positive_int, resolve_dtype
from jspec.cli.options import budget_option, drafter_placeholder
from jspec.errors import UserError


def add_calibrate_parser(sub) -> None:
    cal = sub.add_parser("calibrate", help="warm up a method's state on ShareGPT prompts and save it")
    cal.add_argument("--model", default="smollm2-135m")
    cal.add_argument("--method", default="token_recycling")
    cal.add_argument("--warmup", type=positive_int("--warmup"), default=5, help="ShareGPT prompts to decode")
    cal.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=256)
    cal.add_argument("--budget", type=positive_int("--budget"), default=60)
    cal.add_argument("--drafter", help="EAGLE-3 checkpoint directory (graft, eagle3_pruned)")
    cal.add_argument("--seed", type=int, default=0, help="draws graft's warm-up prompts")
    cal.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    cal.add_argument("--out", required=True, help="file to write the state to (load it with --method-state)")
    cal.add_argument("--tree-out", metavar="FILE", help="token_recycling: warm up on the whole 81-slot tree, count "
                     "the nodes the target accepts, and write the --budget-slot subtree they choose (for --tr-tree)")
    cal.add_argument("--tree-template", choices=("tr-2.2.2", "tr-deep"), help="with --tree-out: the tree counted on "
                     "(default tr-2.2.2, 81 slots; tr-deep: 2.2.2 plus deeper paths, 109 slots, --budget up to 109)")
    cal.set_defaults(run=run_calibrate)


def run_calibrate(args) -> None:
    from tqdm import tqdm

    from jspec.bench.datasets import load_prompts
    from jspec.methods import build, get_method
    from jspec.models.loading import load_model
    from jspec.runner import run_batch
    from jspec.sampling import Sampling

    if args.tree_out and args.method != "token_recycling":
        raise UserError("--tree-out applies to --method token_recycling only")
    if args.tree_template and not args.tree_out:
        raise UserError("--tree-template applies with --tree-out only")
    # --tree-out: --budget sizes the chosen subtree (checked against the counted tree), not the warm-up's tree
    budget = {} if args.tree_out else budget_option(args.method, args.budget)
    if args.tree_out:
        from jspec.retrieval.templates import template

        base = template(args.tree_template or "tr-2.2.2")
        if args.budget > base.size:
            raise UserError(f"--budget {args.budget} is larger than the {base.size}-slot "
                            f"{tree_template_name(args)} tree")
    get_method(args.method, **drafter_placeholder(args.method), **budget)
    dtype = resolve_dtype(args.dtype)
    model = load_model(args.model, dtype=dtype)
    method, params = build(args.method, model, args.drafter, **budget)
    encoded = (model.tokenizer.encode_chat([{"role": "user", "content": r["prompt"]}])
               for r in load_prompts("sharegpt", 20 * args.warmup))
    pool = [ids for ids in encoded if len(ids) <= 1024]  # long conversations would size the cache
    if args.method in ("graft", "eagle3_pruned"):
        from jspec.methods.graft import calibrate

        state, stats = calibrate(model, method, params, pool, warmup=args.warmup, max_new_tokens=args.max_new_tokens,
                                 seed=args.seed)
        method.save_state(state, args.out)
        taus = ", ".join(f"tau_{d} = {t:.3f}" for d, t in zip(method.checkpoints, state.thresholds.tolist()))
        print(f"jspec: {args.method} thresholds from {len(stats['accepted'])} dense-tree steps: {taus}; saved with "
              f"the {'adjacency matrix ' if state.adjacency is not None else ''}to {args.out}", file=sys.stderr)
        return
    prompts = pool[: args.warmup]
    if not prompts:
        raise UserError("no ShareGPT prompt of at most 1024 tokens to warm up on")
    if args.tree_out:
        _calibrate_tree(args, model, method, prompts)
        return
    width = max(map(len, prompts))  # one padded width and cache length: one compilation for every prompt
    state = None
    for i, ids in enumerate(tqdm(prompts, desc="warm-up", unit="prompt")):
        _, state = run_batch(model, method, [ids], max_new_tokens=args.max_new_tokens, sampling=Sampling(), seed=i,
                             max_cache_len=width + args.max_new_tokens + 128, method_params=params,
                             method_state=state, pad_to=width)
    method.save_state(state, args.out)
    print(f"jspec: saved {args.method} state after {len(prompts)} ShareGPT prompts to {args.out}", file=sys.stderr)


def tree_template_name(args) -> str:
    return args.tree_template or "tr-2.2.2"


def _calibrate_tree(args, model, method, prompts: list[list[int]]) -> None:
    """--tree-out: the warm-up decodes on the counted tree (--tree-template), counting accepted nodes; the matrix it
    leaves is saved as usual (it does not depend on the tree it is later used with)."""
    from jspec.retrieval.templates import template
    from jspec.retrieval.tree_stats import count_accepted_nodes, tree_report

    base = template(tree_template_name(args))
    counts, steps, matrix = count_accepted_nodes(model, prompts, max_new_tokens=args.max_new_tokens, base=base,
                                                 desc=f"warm-up ({base.size}-slot tree)")
    report = tree_report(counts, steps, args.budget, base=base, model=args.model, dataset="sharegpt",
                         prompts=len(prompts), template=tree_template_name(args))
    try:
        pathlib.Path(args.tree_out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    except OSError as e:
        raise UserError(f"--tree-out {args.tree_out}: {e.strerror or e}") from None
    method.save_state(matrix, args.out)
    print(f"jspec: {steps} steps on {len(prompts)} ShareGPT prompts: {report['mat_all']:.3f} tokens accepted per "
          f"step with the {base.size}-slot tree; the {args.budget}-slot BFS prefix would accept "
          f"{report['mat_prefix']:.3f}, the "
          f"chosen subtree {report['mat_chosen']:.3f} (written to {args.tree_out}); state saved to {args.out}",
          file=sys.stderr)
