"""Bring-up check of the persistent Domino block kernel (pallas_kernels/domino_step/gpu_block.py) on a GPU. For each
shape it reports compile time, whether any program gave up at the grid barrier, agreement with the same step code
launched once per draft (exact) and with the XLA candidate loop, and µs per 16-draft block against that loop (and
against gpu_loop.py's kernel per draft). Each line is printed as soon as it is measured, so a run cut short by a time
limit still says how far it got.

    python bench/block_kernel_check.py --out OUT_DIR     # small shapes, then the 1.5B head (G 1024, R 256, k 64)
    python bench/block_kernel_check.py --smoke --out D   # CPU: the step code in interpret mode, small shapes only

Writes block_kernel_check.json under --out.
"""

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.domino_head_speed import per_call  # noqa: E402
from pallas_kernels.domino_step import gpu_block  # noqa: E402
from pallas_kernels.domino_step.gpu_loop import candidate_loop_gpu  # noqa: E402
from pallas_kernels.domino_step.reference import candidate_inputs, domino_draft_candidates_reference  # noqa: E402

SHAPES = {"small": dict(n=6, vocab=900, g=256, r=32, k=32), "qwen2.5-1.5b": dict(n=16, vocab=151936, g=1024, r=256,
                                                                                 k=64)}


def head_inputs(seed: int, n: int, vocab: int, g: int, r: int, k: int, dtype) -> dict:
    rng = np.random.default_rng(seed)
    f = lambda *shape, scale=1.0: jnp.asarray(scale * rng.normal(size=shape), jnp.float32)  # noqa: E731
    h = 64
    w = dict(embed=f(vocab, h), w_ih=f(3 * g, h, scale=h**-0.5), w_hh=f(3 * g, g, scale=g**-0.5),
             w_s=f(r, g, scale=g**-0.5), w2=f(vocab, r, scale=2 * r**-0.5))
    w = {name: x.astype(dtype) for name, x in w.items()}
    table = jnp.einsum("vh,gh->vg", w["embed"], w["w_ih"], preferred_element_type=jnp.float32).astype(dtype)
    return dict(base=f(1, n, vocab), z_part=f(1, n, r), bonus=jnp.asarray(rng.integers(0, vocab, 1), jnp.int32),
                table=table, **w)


def say(line: str) -> None:
    print(line, flush=True)


def variant_options(spec: str, sms: int) -> dict:
    """'default', or '+'-joined tokens: w8 (num_warps 8), sms64 (at most 64 programs: more rows each), stop0.05
    (the adaptive head stop at that threshold: the loop ends early, and the drafts are checked against the XLA
    loop's with the same stop)."""
    opts = dict(sms=sms)
    for token in filter(None, spec.split("+")):
        if token == "default":
            continue
        if token.startswith("w") and token[1:].isdigit():
            opts["num_warps"] = int(token[1:])
        elif token.startswith("sms") and token[3:].isdigit():
            opts["sms"] = min(sms, int(token[3:]))
        elif token.startswith("stop"):
            opts["stop"] = float(token[4:])
        else:
            raise SystemExit(f"unknown variant token {token!r} in {spec!r}")
    return opts


def check(name: str, shape: dict, dtype, args, variant: str = "default", baselines: bool = True) -> dict:
    k = shape["k"]
    opts = variant_options(variant, args.sms)
    name = name if variant == "default" else f"{name} [{variant}]"
    x = head_inputs(0, shape["n"], shape["vocab"], shape["g"], shape["r"], k, dtype)
    want = np.asarray(domino_draft_candidates_reference(x["base"], x["z_part"], x["bonus"], x["embed"], x["w_ih"],
                                                        x["w_hh"], x["w_s"], x["w2"], prefix_len=1, candidates=k,
                                                        table=x["table"], stop=opts.get("stop", 0.0)))
    cand_base, cand, cand_w2 = jax.jit(candidate_inputs, static_argnums=2)(x["base"], x["w2"], k)
    block_args = (cand_base, cand, cand_w2, x["z_part"], x["bonus"], x["table"], x["w_hh"], x["w_s"])
    persistent = not args.smoke
    if persistent:
        # First the same step code launched once per draft (no barrier, so it cannot hang): it compiles the step and
        # gives the drafts the persistent kernel must reproduce exactly.
        t = time.perf_counter()
        stepwise, _ = jax.block_until_ready(gpu_block.candidate_block_gpu(*block_args, prefix_len=1,
                                                                          persistent=False, **opts))
        say(f"{name}: one launch per draft: compiled and ran in {time.perf_counter() - t:.1f} s, drafts equal to "
            f"the XLA loop's: {np.mean(np.asarray(stepwise) == want):.0%}")
    block = jax.jit(lambda *a: gpu_block.candidate_block_gpu(*a, prefix_len=1, persistent=persistent,
                                                             interpret=args.smoke, **opts))
    t = time.perf_counter()
    compiled = block.lower(*block_args).compile()
    row = dict(shape=name, variant=variant, **shape, dtype=jnp.dtype(dtype).name, persistent=persistent,
               compile_s=time.perf_counter() - t)
    say(f"{name}: compiled in {row['compile_s']:.1f} s")
    t = time.perf_counter()
    drafts, gave_up = jax.block_until_ready(compiled(*block_args))
    row.update(first_call_ms=1e3 * (time.perf_counter() - t), gave_up=int(gave_up),
               agree=float(np.mean(np.asarray(drafts) == want)))
    say(f"{name}: first call {row['first_call_ms']:.1f} ms, programs that gave up at a barrier: {row['gave_up']}, "
        f"drafts equal to the XLA loop's: {row['agree']:.0%}")
    if args.smoke:
        return row
    # The stepwise launches do the same arithmetic: a difference is a synchronisation bug.
    row["equals_stepwise"] = bool(np.array_equal(np.asarray(drafts), np.asarray(stepwise)))
    say(f"{name}: drafts equal to one launch per draft: {row['equals_stepwise']}")
    drafts_only = lambda *a: block(*a)[0]  # noqa: E731
    row["block_us"] = 1e6 * per_call(drafts_only, block_args, args.reps, args.inner)
    say(f"{name}: block kernel {row['block_us']:.1f} µs per block")
    if not baselines:
        return row
    xla = jax.jit(lambda b, z, bonus: domino_draft_candidates_reference(
        b, z, bonus, x["embed"], x["w_ih"], x["w_hh"], x["w_s"], x["w2"], prefix_len=1, candidates=k,
        table=x["table"]))
    row["xla_loop_us"] = 1e6 * per_call(xla, (x["base"], x["z_part"], x["bonus"]), args.reps, args.inner)
    say(f"{name}: XLA candidate loop {row['xla_loop_us']:.1f} µs per block (top-k and gather included)")
    step = jax.jit(lambda *a: candidate_loop_gpu(*a, prefix_len=1))
    row["step_kernels_us"] = 1e6 * per_call(step, block_args, args.reps, args.inner)
    say(f"{name}: one kernel per draft (gpu_loop.py) {row['step_kernels_us']:.1f} µs per block")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--smoke", action="store_true", help="CPU: interpret the step code (no barrier), small shapes")
    ap.add_argument("--shapes", default="small,qwen2.5-1.5b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--variants", default="default",
                    help="kernel variants timed at the last shape, e.g. default,w8,resident+w8 (see variant_options)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--inner", type=int, default=20)
    args = ap.parse_args()
    if not args.smoke and jax.default_backend() != "gpu":
        sys.exit("needs a GPU (or pass --smoke)")
    args.sms = gpu_block.num_sms()
    say(f"{jax.devices()[0].device_kind}: {args.sms} SMs")
    shapes = ["small"] if args.smoke else args.shapes.split(",")
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [(name, "default", True) for name in shapes[:-1]]
    runs += [(shapes[-1], v, i == 0) for i, v in enumerate(args.variants.split(","))]
    for name, variant, baselines in runs:
        try:
            rows.append(check(name, SHAPES[name], jnp.dtype(args.dtype), args, variant, baselines))
        except Exception as e:  # one variant that fails to compile or run should not hide the others
            say(f"{name} [{variant}]: FAILED: {type(e).__name__}: {str(e)[:300]}")
            rows.append(dict(shape=name, variant=variant, error=f"{type(e).__name__}: {str(e)[:2000]}"))
        (args.out / "block_kernel_check.json").write_text(json.dumps(
            dict(device=jax.devices()[0].device_kind, jax=jax.__version__, command=" ".join(sys.argv), rows=rows),
            indent=1))


if __name__ == "__main__":
    main()
