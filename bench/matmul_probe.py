"""Where does a decode step go? Times XLA's M-row matmuls for each weight shape of a preset, 28 distinct weights each.

    python bench/matmul_probe.py --model qwen2.5-coder-1.5b --rows 1
"""

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from jspec.config import model_preset  # noqa: E402


def bench(f, *args, n=20):
    f(*args).block_until_ready()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f(*args).block_until_ready()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", default="1,16")
    args = ap.parse_args()
    cfg = model_preset(args.model).config
    d, L = cfg.hidden_size, cfg.num_layers
    shapes = {"qkv": (cfg.q_size + 2 * cfg.kv_size, d), "o": (d, cfg.q_size), "gate_up": (2 * cfg.intermediate_size, d),
              "down": (d, cfg.intermediate_size)}
    key = jax.random.key(0)
    total = {}
    for m in map(int, args.rows.split(",")):
        for name, (n, k) in shapes.items():
            ws = jax.random.normal(key, (L, n, k), jnp.bfloat16)
            x = jax.random.normal(key, (m, k), jnp.bfloat16)
            f = jax.jit(lambda x, ws: sum(jnp.einsum("mk,nk->mn", x, ws[i]).astype(jnp.float32).sum() for i in range(L)))
            t = bench(f, x, ws)
            total[(m, name)] = t
            print(f"M={m:3d} {name:8s} N={n:6d} K={k:6d}: {1e6 * t / L:7.1f} us/matmul, {ws.nbytes / t / 1e12:5.2f} TB/s")
        head = jax.random.normal(key, (cfg.vocab_size, d), jnp.bfloat16)
        x = jax.random.normal(key, (m, d), jnp.bfloat16)
        t = bench(jax.jit(lambda x, w: jnp.argmax(jnp.einsum("mk,nk->mn", x, w).astype(jnp.float32), -1)), x, head)
        print(f"M={m:3d} lm_head+argmax: {1e6 * t:7.1f} us, {head.nbytes / t / 1e12:5.2f} TB/s")
        print(f"M={m:3d} sum of layer matmuls: {1e3 * sum(v for (mm, _), v in total.items() if mm == m):.3f} ms")


if __name__ == "__main__":
    main()
