"""XLA M-row matmul time per decode weight shape for both weight layouts ([N, K] as HF, and [K, N]).

    XLA_FLAGS=... python bench/layout_probe.py --model qwen2.5-coder-1.5b --rows 1
28 distinct weights per shape in one jitted call (more than L2), outputs stacked (no extra reduction kernels).
"""

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.timing import timed  # noqa: E402
from jspec.config import model_preset  # noqa: E402




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", type=int, default=1)
    args = ap.parse_args()
    cfg = model_preset(args.model).config
    d, L = cfg.hidden_size, cfg.num_layers
    shapes = {"qkv": (cfg.q_size + 2 * cfg.kv_size, d), "o": (d, cfg.q_size),
              "gate_up": (2 * cfg.intermediate_size, d), "down": (d, cfg.intermediate_size),
              "lm_head": (cfg.vocab_size, d)}
    totals = {"nk": 0.0, "kn": 0.0}
    for name, (n, k) in shapes.items():
        count = 4 if name == "lm_head" else L
        x = jax.random.normal(jax.random.key(1), (args.rows, k), jnp.bfloat16)
        line = f"{name:8s} N={n:6d} K={k:5d}"
        for layout in ("nk", "kn"):
            shape = (n, k) if layout == "nk" else (k, n)
            ws = [jax.random.normal(jax.random.key(i), shape, jnp.bfloat16) for i in range(count)]
            eq = "mk,nk->mn" if layout == "nk" else "mk,kn->mn"
            t = timed(jax.jit(lambda x, *ws: jnp.stack([jnp.einsum(eq, x, w) for w in ws])), x, *ws) / count
            totals[layout] += t * (1 if name == "lm_head" else L)
            line += f"  {layout}: {1e6 * t:6.1f} us ({ws[0].nbytes / t / 1e12:.2f} TB/s)"
        print(line, flush=True)
    print(f"per-step matmul total: nk {1e3 * totals['nk']:.3f} ms, kn {1e3 * totals['kn']:.3f} ms")


if __name__ == "__main__":
    main()
