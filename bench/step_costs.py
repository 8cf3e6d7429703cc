"""Cost of one target step: verify a 60-slot tree vs decode one token, at several context lengths.

    python bench/step_costs.py --model qwen2.5-coder-1.5b --contexts 2048,8192 --out OUT_DIR
    JSPEC_ATTENTION=reference python bench/step_costs.py ...    # the same with XLA attention (GPU default: Pallas)

Random bf16 weights with the preset's exact architecture (time does not depend on weight values). Each row times
one jitted target forward (+ LM head + greedy choice) over T new tokens against a cache holding `context` tokens,
median of many runs after warm-up, plus the adjacency-matrix update of the tree's logits.
"""

import argparse
import functools
import json
import os
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.timing import timed  # noqa: E402
from jspec.config import model_preset  # noqa: E402
from jspec.methods.token_recycling import budget_template  # noqa: E402
from jspec.models.cache import BlockMask, KVCache  # noqa: E402
from jspec.models.decoder import Decoder, attention_kernel  # noqa: E402
from jspec.retrieval import adjacency  # noqa: E402
from jspec.tree import from_static_parents  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--contexts", default="2048,8192")
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    cfg = model_preset(args.model).config
    graphdef, params = nnx.split(Decoder(cfg, dtype=jnp.bfloat16, rngs=nnx.Rngs(0)))
    template = budget_template(args.budget)

    # The cache is donated and threaded through the calls, as in the decode loop: an undonated cache would add a
    # full copy of it to every timed step.
    @functools.partial(jax.jit, donate_argnums=(1,))
    def step(params, cache, tokens, positions, start, block):
        model = nnx.merge(graphdef, params)
        hidden, cache, _ = model(tokens, positions, cache, BlockMask(start=start, block=block))
        logits = model.logits(hidden)
        return jnp.argmax(logits, -1), logits, cache

    def timed_step(cache, *args, n: int = 50):
        """(median seconds of one step, the cache handed back)."""
        times = []
        for i in range(n + 1):
            t = time.perf_counter()
            choice, _, cache = step(params, cache, *args)
            choice.block_until_ready()
            if i:  # the first call compiles
                times.append(time.perf_counter() - t)
        return statistics.median(times), cache

    rows = []
    for context in map(int, args.contexts.split(",")):
        shape = KVCache.init(cfg, 1, context + 128, jnp.bfloat16).k.shape
        cache = KVCache(k=jax.random.normal(jax.random.key(1), shape, jnp.bfloat16),
                        v=jax.random.normal(jax.random.key(2), shape, jnp.bfloat16), lengths=jnp.array([context]))
        start = jnp.array([context])
        decode_s, cache = timed_step(cache, jnp.array([[5]]), start[:, None], start, jnp.ones((1, 1, 1), bool))
        tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (1, args.budget)), jnp.int32)
        tree = from_static_parents(tokens, template.parents)
        tree_args = (tree.tokens, tree.positions(start), start, tree.ancestors)
        verify_s, cache = timed_step(cache, *tree_args)
        _, logits, cache = step(params, cache, *tree_args)
        adj = adjacency.init(cfg.vocab_size)
        update = jax.jit(lambda a, t, v, lg: adjacency.update(a, t, v, lg))
        update_s = timed(update, adj, tree.tokens, tree.valid, logits)
        rows.append({"context": context, "decode_ms": 1e3 * decode_s, "verify_ms": 1e3 * verify_s,
                     "verify_over_decode": verify_s / decode_s, "adjacency_update_ms": 1e3 * update_s,
                     "update_share_of_verify_step": update_s / (verify_s + update_s)})
    report = {"date": time.strftime("%Y-%m-%d"), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "model": args.model, "budget": args.budget,
              "attention": os.environ.get("JSPEC_ATTENTION") or attention_kernel(),
              "command": " ".join(sys.argv), "rows": rows}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_costs.json").write_text(json.dumps(report, indent=2))
    print(f"{report['device']}  {args.model} bf16  budget {args.budget}  attention={report['attention']}")
    print("| context | decode ms | verify ms | verify / decode | adjacency update ms (share of step) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['context']} | {r['decode_ms']:.2f} | {r['verify_ms']:.2f} | {r['verify_over_decode']:.2f} | "
              f"{r['adjacency_update_ms']:.3f} ({100 * r['update_share_of_verify_step']:.1f}%) |")


if __name__ == "__main__":
    main()
