"""Domino's candidate selection (the k highest base logits of each draft row) timed by method, at the 1.5B's shapes.

    python bench/candidate_topk_speed.py --out OUT_DIR             # GPU: [1, 15, 151936] float32 logits, k = 64
    python bench/candidate_topk_speed.py --smoke --out OUT_DIR     # tiny shapes (CPU check)

Outside the persistent block kernel this selection is the largest part of the head's cost in the decode loop (two
XLA sorts, about 46 µs of 162, docs/results/2026-11-30-session10-h200.md). Exact methods: `lax.top_k` over the whole
row and `chunked_top_k` (the shipped one; chunks of 64 by default) at several chunk sizes. Approximate ones, which
change which tokens are drafted but never the output (verification decides): `chunk_max_top_k` (the best entry of
each of the k chunks with the highest maxima; `--candidate-chunk`), the top k/4 of each of 4 interleaved vocabulary
partitions, and `lax.approx_max_k`. Each is reported with its recall of the exact top-k on the same logits (random
here: a real model's logits are more peaked, so real recall differs).
Prints a markdown table and writes candidate_topk_speed.json under --out.
"""

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.domino_head_speed import per_call  # noqa: E402
from pallas_kernels.domino_step.reference import chunk_max_top_k, chunked_top_k  # noqa: E402


def interleaved(x, k: int, parts: int = 4):
    """Approximate: the top k / parts of each of `parts` interleaved partitions (token id mod parts)."""
    *lead, v = x.shape
    split = jnp.moveaxis(x.reshape(*lead, v // parts, parts), -1, -2)  # [..., parts, V / parts]
    values, pos = jax.lax.top_k(split, k // parts)
    ids = pos * parts + jnp.arange(parts)[:, None]
    return values.reshape(*lead, k), ids.reshape(*lead, k)


def methods(k: int) -> dict:
    return {
        "lax.top_k": lambda x: jax.lax.top_k(x, k),
        "chunked_top_k (chunk 64, default)": lambda x: chunked_top_k(x, k, chunk=64),
        "chunked_top_k (chunk 128)": lambda x: chunked_top_k(x, k, chunk=128),
        "chunked_top_k (chunk 256)": lambda x: chunked_top_k(x, k, chunk=256),
        "approx: chunk_max_top_k (chunk 64)": lambda x: chunk_max_top_k(x, k, 64),
        "approx: chunk_max_top_k (chunk 128)": lambda x: chunk_max_top_k(x, k, 128),
        "approx: 4 x top-k/4": lambda x: interleaved(x, k),
        "approx: lax.approx_max_k": lambda x: jax.lax.approx_max_k(x, k, recall_target=0.95),
    }


def recall(ids, exact) -> float:
    """Share of the exact top-k ids that a method found, over all rows."""
    ids, exact = np.asarray(ids), np.asarray(exact)
    hits = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(ids.reshape(-1, ids.shape[-1]),
                                                                    exact.reshape(-1, exact.shape[-1]))]
    return sum(hits) / exact.size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (CPU check)")
    ap.add_argument("--rows", type=int, default=15, help="draft rows per block (the corrected drafts)")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--inner", type=int, default=20)
    args = ap.parse_args()
    if args.smoke:
        args.vocab, args.k, args.reps, args.inner = 4096, 16, 2, 2
    if args.vocab % 128:  # chunked_top_k pads a partial chunk; the approximations do not
        ap.error(f"--vocab {args.vocab} must be a multiple of 128 (the approximate methods' chunks)")
    if args.k % 4:
        ap.error(f"--k {args.k} must be a multiple of 4 (the interleaved method's partitions)")
    x = jax.random.normal(jax.random.key(0), (1, args.rows, args.vocab), jnp.float32) * 3
    _, exact = jax.jit(lambda x: jax.lax.top_k(x, args.k))(x)
    rows = []
    for name, fn in methods(args.k).items():
        _, ids = jax.jit(fn)(x)
        us = per_call(fn, (x,), args.reps, args.inner) * 1e6
        rows.append({"method": name, "us": us, "recall": recall(ids, exact)})
        print(f"{name}: {us:.1f} µs, recall {rows[-1]['recall']:.3f}", flush=True)
    lines = ["| method | µs per block | recall of the exact top-k (random logits) |", "|---|---|---|"]
    lines += [f"| {r['method']} | {r['us']:.1f} | {r['recall']:.3f} |" for r in rows]
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "rows": args.rows, "vocab": args.vocab,
            "k": args.k, "reps": args.reps, "inner": args.inner}
    (args.out / "candidate_topk_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
