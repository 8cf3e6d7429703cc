"""How often each node of Token Recycling's 81-slot tree is on the accepted path, and the 60-slot tree those counts
choose (`templates.best_subtree`), over a dataset's prompts decoded greedily with a warm adjacency matrix.

    python bench/tr_node_stats.py --model qwen2.5-coder-1.5b --dataset humaneval --limit 20 --out OUT_DIR

The default 60-slot tree is a BFS prefix of the 81-slot one: it keeps depth-3 nodes of rank 4-7 and drops the rank-0
chain past depth 4. Writes tr_node_stats.json: per node its rank path and accepted count, the expected accepted
length of the prefix and of the chosen subtree under these counts, and the chosen subtree's rank paths.
"""

import argparse
import dataclasses
import json
import pathlib
import sys

import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.methods.token_recycling import TokenRecycling  # noqa: E402
from jspec.models.loading import load_model  # noqa: E402
from jspec.retrieval.templates import TR_SIZE, best_subtree, tr_prefix, words  # noqa: E402
from jspec.runner import run_batch  # noqa: E402
from jspec.sampling import Sampling  # noqa: E402


@dataclasses.dataclass(frozen=True)
class CountingTR(TokenRecycling):
    """Token Recycling whose state also counts, per tree slot, the steps whose accepted path went through it."""

    def init_state(self, params, batch, max_cache_len):
        return super().init_state(params, batch, max_cache_len), jnp.zeros((self.budget,), jnp.int32)

    def propose(self, params, state, ctx):
        tree, adjacency = super().propose(params, state[0], ctx)
        return tree, (adjacency, state[1])

    def observe(self, params, state, tree, logits, acceptance, features):
        adjacency = super().observe(params, state[0], tree, logits, acceptance, features)
        on_path = jnp.arange(acceptance.path.shape[1])[None, :] < acceptance.path_len[:, None]
        counts = state[1].at[acceptance.path].add(on_path.astype(jnp.int32))
        return adjacency, counts


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
    method = CountingTR(vocab_size=model.cfg.vocab_size, budget=TR_SIZE)
    prompts = _encode(model, load_prompts(args.dataset, args.limit), 1024)
    width = -(-max(len(p["ids"]) for p in prompts) // 64) * 64  # one padded width and cache: one compilation
    kw = dict(max_new_tokens=args.max_new_tokens, sampling=Sampling(), seed=0, pad_to=width,
              max_cache_len=width + args.max_new_tokens + 128)
    state, steps = None, 0
    for p in tqdm(prompts, desc=f"{args.dataset}/token_recycling (81 slots)", unit="prompt"):
        [rec], state = run_batch(model, method, [p["ids"]], method_state=state, **kw)
        steps += rec["steps"] - 1  # the prefill's token is not a tree step
    counts = np.asarray(state[1])
    full = tr_prefix(TR_SIZE)
    chosen = best_subtree(full, counts, args.budget)
    prefix = np.arange(args.budget)
    chosen_slots = [words(full).index(w) for w in words(chosen)]
    report = {"model": args.model, "dataset": args.dataset, "prompts": len(prompts), "steps": steps,
              "nodes": [{"path": w, "accepted": int(c)} for w, c in zip(words(full), counts)],
              # MAT = accepted nodes per step (root = the bonus token's slot included): sum of node rates
              "mat_81": float(counts.sum() / steps), "mat_prefix": float(counts[prefix].sum() / steps),
              "mat_chosen": float(counts[chosen_slots].sum() / steps), "chosen": words(chosen)[1:]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tr_node_stats.json").write_text(json.dumps(report, indent=1))
    print(f"{steps} steps: MAT with the 81-slot tree {report['mat_81']:.3f}; within it, the {args.budget}-slot BFS "
          f"prefix would accept {report['mat_prefix']:.3f} and the chosen subtree {report['mat_chosen']:.3f}")
    print("chosen:", " ".join(report["chosen"]))


if __name__ == "__main__":
    main()
