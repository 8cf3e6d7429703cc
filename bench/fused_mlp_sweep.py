"""Fused decode MLP (Pallas) vs XLA's two matmuls on a preset's shapes: correctness + config sweep.

    python bench/fused_mlp_sweep.py --model qwen2.5-coder-1.5b --rows 1 --out OUT_DIR
Writes fused_mlp_sweep_m{rows}.json and best_m{rows}.txt ("bf,bk,bd,warps,stages") under --out.
"""

import argparse
import itertools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.timing import timed  # noqa: E402
from jspec.config import model_preset  # noqa: E402
from pallas_kernels.fused_mlp.kernel import fused_mlp, fused_mlp_reference  # noqa: E402




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=200)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    cfg = model_preset(args.model).config
    d, f, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    ks = jax.random.split(jax.random.key(0), 2 * L + 1)
    gus = [jax.random.normal(ks[i], (2 * f, d), jnp.bfloat16) * 0.03 for i in range(L)]
    dns = [jax.random.normal(ks[L + i], (d, f), jnp.bfloat16) * 0.03 for i in range(L)]
    x = jax.random.normal(ks[-1], (args.rows, d), jnp.bfloat16)
    ref = fused_mlp_reference(x.astype(jnp.float32), gus[0].astype(jnp.float32), dns[0].astype(jnp.float32))
    nbytes = gus[0].nbytes + dns[0].nbytes

    def chain(op):
        return jax.jit(lambda x, gus, dns: jnp.stack([op(x, g, w) for g, w in zip(gus, dns)]))

    t_xla = timed(chain(fused_mlp_reference), x, gus, dns) / L
    print(f"XLA MLP: {1e6 * t_xla:.1f} us ({nbytes / t_xla / 1e12:.2f} TB/s)", flush=True)
    rows, best, t0 = [], None, time.time()
    for bf, bk, bd, warps, stages in itertools.product((16, 32, 64), (128, 256), (128, 256, 512), (4, 8), (2, 3)):
        if time.time() - t0 > args.budget_s or f % bf or d % bk or d % bd:
            continue
        op = lambda x, g, w: fused_mlp(x, g, w, block_f=bf, block_k=bk, block_d=bd, num_warps=warps,  # noqa: E731
                                       num_stages=stages)
        try:
            err = float(jnp.linalg.norm(op(x, gus[0], dns[0]).astype(jnp.float32) - ref) / jnp.linalg.norm(ref))
            t = timed(chain(op), x, gus, dns) / L
        except Exception as e:  # noqa: BLE001
            rows.append({"cfg": [bf, bk, bd, warps, stages], "error": str(e)[:300]})
            continue
        rows.append({"cfg": [bf, bk, bd, warps, stages], "us": 1e6 * t, "TBs": nbytes / t / 1e12, "rel_err": err})
        if err < 2e-2 and (best is None or t < best[0]):
            best = (t, [bf, bk, bd, warps, stages])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"fused_mlp_sweep_m{args.rows}.json").write_text(json.dumps(
        {"xla_us": 1e6 * t_xla, "rows": rows, "best": best and {"us": 1e6 * best[0], "cfg": best[1]}}, indent=2))
    if best:
        (out / f"best_m{args.rows}.txt").write_text(",".join(map(str, best[1])))
        print(f"best fused: {1e6 * best[0]:.1f} us ({nbytes / best[0] / 1e12:.2f} TB/s) cfg {best[1]}; "
              f"{sum('us' in r for r in rows)} configs ok, {sum('error' in r for r in rows)} failed")
    else:
        print("no working config:", rows[:3])


if __name__ == "__main__":
    main()
