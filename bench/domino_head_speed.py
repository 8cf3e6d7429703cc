"""Domino correction head: fused Pallas correction + argmax kernel vs the unfused XLA loop (full-vocabulary logits per
step, then argmax), for the whole greedy draft loop of one block and for one step alone.

    python bench/domino_head_speed.py --out OUT_DIR            # GPU/TPU: Qwen3-8B head (H 4096, G 1024, R 256,
                                                               # V 151936), 16 drafts, B = 1, 16, bf16
    python bench/domino_head_speed.py --smoke --out OUT_DIR    # tiny shapes, kernels in interpret mode (CPU)

The loop variants also run with the precomputed GRU input table E · W_ih^T ([V, 3G]; what the official CUDA-graph
runner gathers from) instead of the per-step W_ih GEMV. Every kernel's drafts are compared with the reference's
(bf16 near-ties may flip a token; the count of differing rows is reported). `--candidates` adds the loop that
corrects only each row's k highest base logits (table input): as the XLA loop, with one fused kernel per draft
(`candidates-k-step`, gpu_loop.py) and, at batch 1, as one persistent kernel for the whole block
(`candidates-k-block`, gpu_block.py; in --smoke one interpreted launch per draft, since the interpreter cannot run its
grid barrier). Their drafts may differ from the full head's by design. Times are
medians over `--reps`, each the mean over `--inner` calls chained in one jitted loop (device time, no host dispatch
in between). Prints a markdown table and writes `domino_head_speed.json` under --out. Paper figure for comparison:
head 2.64 ms -> 1.20 ms (Qwen3-8B, Triton + CUDA graph, algorithms.md §1.4).
"""

import argparse
import itertools
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.timing import timed  # noqa: E402
from pallas_kernels.domino_step import correction_argmax, domino_draft  # noqa: E402
from pallas_kernels.domino_step import domino_draft_candidates  # noqa: E402
from pallas_kernels.domino_step.reference import (correction_argmax_reference,  # noqa: E402
                                                  domino_draft_candidates_reference)


def per_call(fn, args: tuple, reps: int, inner: int) -> float:
    """Seconds per `fn(*args)`: `inner` calls chained through an optimisation barrier in one jitted loop."""

    def body(_, carry):
        out, a = jax.lax.optimization_barrier(carry)
        return fn(*a), a

    loop = jax.jit(lambda *a: jax.lax.fori_loop(0, inner, body, (fn(*a), a))[0])
    return timed(loop, *args, n=reps) / inner


def make_head(args, b: int, dtype):
    keys = iter(jax.random.split(jax.random.key(b), 16))
    h, g, r, v, n = args.hidden, args.gru, args.rank, args.vocab, args.drafts

    def w(*shape, scale):
        return (jax.random.normal(next(keys), shape, jnp.float32) * scale).astype(dtype)

    weights = dict(embed=w(v, h, scale=0.02), w_ih=w(3 * g, h, scale=h**-0.5), w_hh=w(3 * g, g, scale=g**-0.5),
                   w_z=w(r, h, scale=h**-0.5), w_s=w(r, g, scale=g**-0.5), w2=w(v, r, scale=r**-0.5))
    inputs = dict(hidden=w(b, n, h, scale=1.0), base=jax.random.normal(next(keys), (b, n, v), jnp.float32) * 3,
                  bonus=jax.random.randint(next(keys), (b,), 0, v))
    return weights, inputs


def loop_fn(args, table: bool, candidates: int = 0, fused_candidates: str | None = None, **kernel):
    """hidden, base, bonus, weights -> drafts: W_z GEMM over the block rows, then the sequential loop.
    `fused_candidates`: the candidate loop as GPU kernels, "step" (one per draft, gpu_loop.py) or "block" (one
    persistent kernel, gpu_block.py)."""

    def run(hidden, base, bonus, weights):
        z_part = jnp.einsum("bnh,rh->bnr", hidden, weights["w_z"], preferred_element_type=jnp.float32)
        gi_table = weights["table"] if table else None
        common = dict(prefix_len=args.prefix, table=gi_table)
        w = (weights["embed"], weights["w_ih"], weights["w_hh"], weights["w_s"], weights["w2"])
        if candidates and fused_candidates:
            return domino_draft_candidates(base, z_part, bonus, *w, **common, candidates=candidates, platform="gpu",
                                           fused=fused_candidates, interpret=args.smoke)
        if candidates:
            return domino_draft_candidates_reference(base, z_part, bonus, *w, **common, candidates=candidates)
        if kernel:
            return domino_draft(base, z_part, bonus, *w, **common, **kernel)
        return domino_draft(base, z_part, bonus, *w, **common, platform="reference")

    return run


def kernel_configs(args) -> list[dict]:
    if args.smoke:
        return [dict(platform="gpu", interpret=True, block_v=128), dict(platform="tpu", interpret=True, block_v=128)]
    if jax.default_backend() == "tpu":
        return [dict(platform="tpu", block_v=bv) for bv in args.block_v if bv % 128 == 0]
    configs = []
    for bv, warps in itertools.product(args.block_v, args.num_warps):
        kw = dict(platform="gpu", block_v=bv, num_warps=warps)
        if args.splits:
            kw["splits"] = args.splits
        configs.append(kw)
    return configs


def bench_batch(args, b: int, dtype) -> list[dict]:
    weights, inputs = make_head(args, b, dtype)
    weights["table"] = jnp.einsum("vh,gh->vg", weights["embed"], weights["w_ih"]).astype(dtype)
    case = dict(B=b, N=args.drafts, H=args.hidden, G=args.gru, R=args.rank, V=args.vocab, dtype=jnp.dtype(dtype).name)
    loop_args = (inputs["hidden"], inputs["base"], inputs["bonus"], weights)
    expect = np.asarray(jax.jit(loop_fn(args, table=False))(*loop_args))
    # One step alone: pre-activation and base logits of draft row 1.
    pre = jax.random.normal(jax.random.key(7), (b, args.rank), jnp.float32)
    step_args = (pre, weights["w2"], inputs["base"][:, 1])
    w2_bytes = weights["w2"].size * weights["w2"].dtype.itemsize
    rows = []

    def record(impl: str, config: dict, table: bool, kernel: dict | None):
        fn = jax.jit(loop_fn(args, table, **(kernel or {})))
        drafts = np.asarray(fn(*loop_args))
        differ = int(np.sum(np.any(drafts != expect, axis=1)))
        t_loop = per_call(fn, loop_args, args.reps, args.inner)
        step = jax.jit(lambda *a: correction_argmax(*a, **kernel) if kernel else correction_argmax_reference(*a))
        t_step = per_call(step, step_args, args.reps, args.inner)
        rows.append(dict(case, impl=impl, table=table, config=config, rows_differing=differ, loop_us=1e6 * t_loop,
                         step_us=1e6 * t_step, step_w2_gb_s=w2_bytes / t_step / 1e9))

    for k, fused in itertools.product(args.candidates, (None, "step", "block")):
        if fused and jax.default_backend() == "tpu" or fused == "block" and b != 1:
            continue  # the fused candidate loops are GPU kernels; the block kernel drafts one row
        fn = jax.jit(loop_fn(args, table=True, candidates=k, fused_candidates=fused))
        drafts = np.asarray(fn(*loop_args))
        rows.append(dict(case, impl=f"candidates-{k}" + (f"-{fused}" if fused else ""), table=True, config={},
                         rows_differing=int(np.sum(np.any(drafts != expect, axis=1))),
                         loop_us=1e6 * per_call(fn, loop_args, args.reps, args.inner), step_us=None,
                         step_w2_gb_s=None))
    for table in (False, True):
        record("unfused", {}, table, None)
        for kw in kernel_configs(args):
            record(f"fused-{kw['platform']}", {k: v for k, v in kw.items() if k not in ("platform", "interpret")},
                   table, kw)
    return rows


def _num(x: float | None, fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def markdown(rows: list[dict]) -> str:
    head = ("| B | dtype | impl | table | config | rows differing | loop us | step us | step W2 GB/s |\n"
            + "|---" * 9 + "|")
    lines = [f"| {r['B']} | {r['dtype']} | {r['impl']} | {r['table']} | "
             f"{' '.join(f'{a}={v}' for a, v in r['config'].items())} | {r['rows_differing']} | {r['loop_us']:.1f} | "
             f"{_num(r['step_us'], '.1f')} | {_num(r['step_w2_gb_s'], '.0f')} |" for r in rows]
    return "\n".join([head, *lines])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, kernels in interpret mode (runs on CPU)")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--gru", type=int, default=1024)
    ap.add_argument("--rank", type=int, default=256)
    ap.add_argument("--drafts", type=int, default=16)
    ap.add_argument("--prefix", type=int, default=1, help="leading drafts without correction")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--block-v", type=lambda s: [int(x) for x in s.split(",")], default=[64, 128, 256])
    ap.add_argument("--num-warps", type=lambda s: [int(x) for x in s.split(",")], default=[4, 8])
    ap.add_argument("--splits", type=int, default=None, help="GPU vocabulary chunks (default: heuristic)")
    ap.add_argument("--candidates", type=lambda s: [int(x) for x in s.split(",") if x], default=[64, 256],
                    help="also time the candidate-restricted loop with these k (drafts may differ from the full head)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--inner", type=int, default=20)
    args = ap.parse_args()
    if args.smoke:
        args.vocab, args.hidden, args.gru, args.rank, args.drafts = 1000, 32, 256, 16, 4  # G: the fused loop's minimum
        args.batches, args.reps, args.inner = "1,2", 2, 1
    elif jax.default_backend() not in ("gpu", "cuda", "rocm", "tpu"):
        sys.exit("needs a GPU or TPU (or pass --smoke)")
    rows = []
    for b in (int(x) for x in args.batches.split(",")):
        rows += bench_batch(args, b, jnp.dtype(args.dtype))
    print(markdown(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    result = dict(device=str(jax.devices()[0].device_kind), backend=jax.default_backend(), jax=jax.__version__,
                  smoke=args.smoke, command=" ".join(sys.argv), rows=rows)
    (args.out / "domino_head_speed.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
