"""Pallas split-K skinny matmul vs XLA on a preset's decode shapes: correctness, then a small config sweep.

    python bench/skinny_matmul_sweep.py --model qwen2.5-coder-1.5b --out OUT_DIR
Each timing runs one jitted call over 28 distinct weights (bigger than L2), median of 20.
"""

import argparse
import itertools
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from jspec.config import model_preset  # noqa: E402
from pallas_kernels.skinny_matmul import kernel as sk  # noqa: E402


def timed(f, *args, n=20):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    cfg = model_preset(args.model).config
    d, L = cfg.hidden_size, cfg.num_layers
    shapes = {"qkv": (cfg.q_size + 2 * cfg.kv_size, d), "o": (d, cfg.q_size),
              "gate_up": (2 * cfg.intermediate_size, d), "down": (d, cfg.intermediate_size),
              "lm_head": (cfg.vocab_size, d)}
    t_start = time.time()
    results = {}
    for name, (n, k) in shapes.items():
        count = 4 if name == "lm_head" else L
        ws = [jax.random.normal(jax.random.key(i), (n, k), jnp.bfloat16) for i in range(count)]
        x = jax.random.normal(jax.random.key(99), (args.rows, k), jnp.bfloat16)
        ref = sk.skinny_matmul_reference(x.astype(jnp.float32), ws[0].astype(jnp.float32))
        xla = jax.jit(lambda x, *ws: jnp.stack([jnp.einsum("mk,nk->mn", x, w) for w in ws]))
        t_xla = timed(xla, x, *ws) / count
        bytes_per = ws[0].nbytes
        row = {"N": n, "K": k, "xla_us": 1e6 * t_xla, "xla_TBs": bytes_per / t_xla / 1e12, "configs": []}
        best = None
        for bn, bk, stages, target in itertools.product((32, 64, 128), (128, 256, 512), (3, 4), (264, 1056)):
            if time.time() - t_start > args.budget_s or n % bn or k % bk:
                continue
            splits = sk.choose_splits(n, k, bn, bk, target)
            op = lambda x, w: sk.skinny_matmul(x, w, block_n=bn, block_k=bk, splits=splits, num_stages=stages)  # noqa: E731
            try:
                err = float(jnp.linalg.norm(op(x, ws[0]).astype(jnp.float32) - ref) / jnp.linalg.norm(ref))
                f = jax.jit(lambda x, *ws: jnp.stack([op(x, w) for w in ws]))
                t = timed(f, x, *ws) / count
            except Exception as e:  # noqa: BLE001
                row["configs"].append({"bn": bn, "bk": bk, "stages": stages, "splits": splits, "error": str(e)[:200]})
                continue
            cfg_row = {"bn": bn, "bk": bk, "stages": stages, "splits": splits, "us": 1e6 * t,
                       "TBs": bytes_per / t / 1e12, "rel_err": err}
            row["configs"].append(cfg_row)
            if err < 1e-2 and (best is None or t < best[0]):
                best = (t, cfg_row)
        row["best"] = best[1] if best else None
        results[name] = row
        b = row["best"]
        print(f"{name:8s} N={n:6d} K={k:5d}  XLA {row['xla_us']:7.1f} us ({row['xla_TBs']:.2f} TB/s)  "
              f"pallas {b['us'] if b else float('nan'):7.1f} us ({b['TBs'] if b else 0:.2f} TB/s) {b}", flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"skinny_matmul_sweep_m{args.rows}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
