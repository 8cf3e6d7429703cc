"""Does splitting the contraction of the target's projections help at verification widths (M = 16..64 rows)?

At M = 60 XLA tiles the 1.5B's q/k/v and o projections into few output tiles (N = 2048 and 1536 at a 64-row tile
are 16 and 12 programs on 132 SMs), so they stream their weights at a fraction of HBM bandwidth. A split-K product
(partial products over K/s, summed in float32) gives s times more programs. This times 28 unrolled decoder-shaped
layers (qkv, o, gate/up, down with their elementwise glue) under one jit for each split choice, per projection, and
prints µs per layer, one line at a time.

    python bench/split_k_probe.py --out OUT_DIR [--rows 1,16,60] [--splits 1,2,4,8]
"""

import argparse
import itertools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

# (name, N, K) of Qwen2.5-1.5B's projections, weights stored [N, K] as in jspec/models/decoder.py.
PROJECTIONS = (("qkv", 2048, 1536), ("o", 1536, 1536), ("gate_up", 17920, 1536), ("down", 1536, 8960))
LAYERS = 28


def project(x, w, split: int):
    """x [M, K] · w [N, K]^T with the contraction cut into `split` float32 partial products."""
    if split == 1:
        return jnp.einsum("mk,nk->mn", x, w)
    m, k = x.shape
    part = jnp.einsum("msk,nsk->smn", x.reshape(m, split, k // split), w.reshape(w.shape[0], split, k // split),
                      preferred_element_type=jnp.float32)
    return part.sum(0).astype(x.dtype)


def norm(x):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype)


def layers(x, weights, splits: dict):
    for qkv, o, gate_up, down in zip(*weights):
        a = project(norm(x), qkv, splits["qkv"])
        x = x + project(jnp.tanh(a[:, :1536]), o, splits["o"])
        g, u = jnp.split(project(norm(x), gate_up, splits["gate_up"]), 2, axis=-1)
        x = x + project(jax.nn.silu(g) * u, down, splits["down"])
    return x


def time_call(fn, args, reps: int, inner: int) -> float:
    jax.block_until_ready(fn(*args))
    best = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        best.append((time.perf_counter() - t) / inner)
    return float(np.median(best))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--rows", default="1,16,60")
    ap.add_argument("--splits", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    weights = [[jnp.asarray(rng.normal(size=(n, k)) * k**-0.5, jnp.bfloat16) for _ in range(LAYERS)]
               for _, n, k in PROJECTIONS]
    splits = [int(s) for s in args.splits.split(",")]
    rows_out = []
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{jax.devices()[0].device_kind}, {LAYERS} layers, µs per layer", flush=True)
    for m in (int(r) for r in args.rows.split(",")):
        x = jnp.asarray(rng.normal(size=(m, 1536)), jnp.bfloat16)
        base = {name: 1 for name, _, _ in PROJECTIONS}
        plain = jax.jit(lambda x, w: layers(x, w, base))
        t0 = 1e6 * time_call(plain, (x, weights), args.reps, args.inner) / LAYERS
        ref = np.asarray(plain(x, weights), np.float32)
        rows_out.append(dict(rows=m, projection="none", split=1, us_per_layer=t0))
        print(f"M={m:3d} all unsplit: {t0:7.2f}", flush=True)
        for (name, n, k), s in itertools.product(PROJECTIONS, splits):
            if s == 1 or k % s:
                continue
            fn = jax.jit(lambda x, w, cfg=dict(base, **{name: s}): layers(x, w, cfg))
            t = 1e6 * time_call(fn, (x, weights), args.reps, args.inner) / LAYERS
            err = float(np.max(np.abs(np.asarray(fn(x, weights), np.float32) - ref)) / (np.max(np.abs(ref)) + 1e-9))
            rows_out.append(dict(rows=m, projection=name, split=s, us_per_layer=t, rel_err=err))
            print(f"M={m:3d} {name:8s} split {s}: {t:7.2f} ({t - t0:+.2f})  rel err {err:.1e}", flush=True)
        (args.out / "split_k_probe.json").write_text(json.dumps(
            dict(device=jax.devices()[0].device_kind, jax=jax.__version__, command=" ".join(sys.argv),
                 rows=rows_out), indent=1))


if __name__ == "__main__":
    main()
