"""How often each node of Token Recycling's 81-slot tree is on the accepted path, and the 60-slot tree those counts
choose (`jspec.retrieval.tree_stats`), over a dataset's prompts decoded greedily with a warm adjacency matrix.

    python bench/tr_node_stats.py --model qwen2.5-coder-1.5b --dataset humaneval --limit 20 --out OUT_DIR

The default 60-slot tree is a BFS prefix of the 81-slot one: it keeps depth-3 nodes of rank 4-7 and drops the rank-0
chain past depth 4. Writes tr_node_stats.json, a tree file for `--tr-tree`. `jspec calibrate --method token_recycling
--tree-out F` does the same on ShareGPT warm-up prompts.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.models.loading import load_model  # noqa: E402
from jspec.retrieval.tree_stats import count_accepted_nodes, tree_report  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--budget", type=int, default=60, help="slots of the chosen subtree")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("."))
    args = ap.parse_args()
    model = load_model(args.model, dtype=args.dtype)
    prompts = [p["ids"] for p in _encode(model, load_prompts(args.dataset, args.limit), 1024)]
    counts, steps, _ = count_accepted_nodes(model, prompts, max_new_tokens=args.max_new_tokens,
                                            desc=f"{args.dataset}/token_recycling (81 slots)")
    report = tree_report(counts, steps, args.budget, model=args.model, dataset=args.dataset, prompts=len(prompts))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tr_node_stats.json").write_text(json.dumps(report, indent=1))
    print(f"{steps} steps: MAT with the 81-slot tree {report['mat_81']:.3f}; within it, the {args.budget}-slot BFS "
          f"prefix would accept {report['mat_prefix']:.3f} and the chosen subtree {report['mat_chosen']:.3f}")
    print("chosen:", " ".join(report["chosen"]))


if __name__ == "__main__":
    main()
