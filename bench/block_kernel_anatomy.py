"""Where the persistent Domino block kernel's time goes (GPU): µs per 16-draft block of the kernel with parts of each
step removed. The ablated kernels draft garbage; only their times mean something.

    full           the kernel as shipped
    no-barrier     no grid barrier (programs run ahead on stale ring slots)
    no-products    the weight-row and candidate products replaced by zeros (no W_hh/W_s/candidate reads or dots)
    no-row-dots    only the [W_hh; W_s] row products replaced by zeros
    no-cand-dot    only the candidate scores' product (W2 rows of the k candidates) replaced by zeros
    serial-only    neither: the per-step chain of reductions, table read and GRU gate math
    barrier-only   a fixed token and no products: the barrier, the table read and the gate math

    python bench/block_kernel_anatomy.py --out OUT_DIR
"""

import argparse
import contextlib
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.block_kernel_check import SHAPES, head_inputs  # noqa: E402
from bench.domino_head_speed import per_call  # noqa: E402
from pallas_kernels.domino_step import gpu_block  # noqa: E402
from pallas_kernels.domino_step.reference import candidate_inputs  # noqa: E402


def _no_barrier(sync_ref, target):
    gpu_block.pltriton.debug_barrier()


def _zero_products(w, vec):
    return jnp.zeros((1, w.shape[0]), jnp.float32)


def _zero_if(rows: int):
    """Zeros for the products over `rows`-row weights (the candidate product has k rows, the ring's `rows`)."""
    real = gpu_block._dot_rows
    return lambda w, vec: _zero_products(w, vec) if w.shape[0] == rows else real(w, vec)


def _fixed_token(i, **_):
    return jnp.int32(0)


ABLATIONS = {"full": {}, "no-barrier": {"_grid_barrier": _no_barrier}, "no-products": {"_dot_rows": _zero_products},
             "serial-only": {"_grid_barrier": _no_barrier, "_dot_rows": _zero_products},
             "barrier-only": {"_dot_rows": _zero_products, "_choose": _fixed_token}}


def add_split_ablations(k: int, rows: int) -> None:
    assert k != rows, "the split ablations tell the two products apart by their row count"
    ABLATIONS["no-row-dots"] = {"_dot_rows": _zero_if(rows)}
    ABLATIONS["no-cand-dot"] = {"_dot_rows": _zero_if(k)}


@contextlib.contextmanager
def patched(replacements: dict):
    saved = {name: getattr(gpu_block, name) for name in replacements}
    try:
        for name, fn in replacements.items():
            setattr(gpu_block, name, fn)
        yield
    finally:
        for name, fn in saved.items():
            setattr(gpu_block, name, fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--inner", type=int, default=20)
    args = ap.parse_args()
    if jax.default_backend() != "gpu":
        sys.exit("needs a GPU")
    shape = SHAPES[args.shape]
    x = head_inputs(0, shape["n"], shape["vocab"], shape["g"], shape["r"], shape["k"], jnp.bfloat16)
    cand_base, cand, cand_w2 = jax.jit(candidate_inputs, static_argnums=2)(x["base"], x["w2"], shape["k"])
    block_args = (cand_base, cand, cand_w2, x["z_part"], x["bonus"], x["table"], x["w_hh"], x["w_s"])
    add_split_ablations(shape["k"], gpu_block.block_rows(shape["g"], shape["r"], gpu_block.num_sms()))
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{jax.devices()[0].device_kind}, {args.shape}: µs per block", flush=True)
    for name, replacements in ABLATIONS.items():
        with patched(replacements):
            # A fresh function per ablation: jit caches by function, and the patch changes what is traced.
            fn = jax.jit(lambda *a: gpu_block.candidate_block_gpu.__wrapped__(*a, prefix_len=1,
                                                                              sms=gpu_block.num_sms())[0])
            us = 1e6 * per_call(fn, block_args, args.reps, args.inner)
        rows.append(dict(ablation=name, us_per_block=us))
        print(f"{name:13s} {us:7.1f}", flush=True)
        (args.out / "block_kernel_anatomy.json").write_text(json.dumps(
            dict(device=jax.devices()[0].device_kind, jax=jax.__version__, command=" ".join(sys.argv),
                 shape=args.shape, rows=rows), indent=1))


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
