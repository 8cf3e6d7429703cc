"""How often each node of a Token Recycling base tree (the 81-slot 2.2.2 tree, or `--template tr-deep`: 2.2.2 plus
deeper paths, 109 slots) is on the accepted path, and the trees of each budget those counts choose
(`jspec.retrieval.tree_stats`), over a dataset's prompts decoded greedily with a warm adjacency matrix.

    python bench/tr_node_stats.py --model qwen2.5-coder-1.5b --dataset mbpp --limit 50 --template tr-deep \
        --budgets 60,81 --out OUT_DIR

The default 60-slot tree is a BFS prefix of the 81-slot one: it keeps depth-3 nodes of rank 4-7 and drops the rank-0
chain past depth 4. Writes tr_node_stats.json (the first budget's report; a tree file for `--tr-tree`) and
tr_tree_<budget>.json per budget. `jspec calibrate --method token_recycling --tree-out F` does the same on ShareGPT
warm-up prompts with the 81-slot tree.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.models.loading import load_model  # noqa: E402
from jspec.retrieval.templates import template  # noqa: E402
from jspec.retrieval.tree_stats import count_accepted_nodes, tree_report  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--budgets", default="60", help="slots of the chosen subtrees, comma-separated")
    ap.add_argument("--template", default="tr-2.2.2", help="base tree: tr-2.2.2 (81 slots) or tr-deep (109)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("."))
    args = ap.parse_args()
    base = template(args.template)
    budgets = [int(b) for b in args.budgets.split(",")]
    if not all(1 <= b <= base.size for b in budgets):
        ap.error(f"--budgets must lie in 1..{base.size} (the {args.template} tree's slots)")
    model = load_model(args.model, dtype=args.dtype)
    prompts = [p["ids"] for p in _encode(model, load_prompts(args.dataset, args.limit), 1024)]
    counts, steps, _ = count_accepted_nodes(model, prompts, max_new_tokens=args.max_new_tokens, base=base,
                                            desc=f"{args.dataset}/token_recycling ({base.size} slots)")
    args.out.mkdir(parents=True, exist_ok=True)
    for i, budget in enumerate(budgets):
        report = tree_report(counts, steps, budget, base=base, model=args.model, dataset=args.dataset,
                             prompts=len(prompts), template=args.template)
        text = json.dumps(report, indent=1)
        (args.out / f"tr_tree_{budget}.json").write_text(text)
        if i == 0:
            (args.out / "tr_node_stats.json").write_text(text)
        print(f"{steps} steps: MAT with the {base.size}-slot tree {report['mat_all']:.3f}; within it, the "
              f"{budget}-slot BFS prefix would accept {report['mat_prefix']:.3f} and the chosen subtree "
              f"{report['mat_chosen']:.3f}")
        print(f"chosen {budget}:", " ".join(report["chosen"]))


if __name__ == "__main__":
    main()
