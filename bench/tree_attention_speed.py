"""Tree-attention kernel vs XLA at Qwen2.5-Coder-1.5B attention shapes: one layer, bf16.

    python bench/tree_attention_speed.py --out OUT_DIR                 # on the GPU (or TPU)
    python bench/tree_attention_speed.py --smoke --out /tmp/ta         # tiny shapes, kernel in interpret mode, CPU

Cases: each T of `--tokens` (default 60, a verification tree, and 1, decode; random tree masks) at several context
lengths and `--batch` rows (start = context; the cache holds `--capacity` slots, default context + 128).

Timed: the kernel, the pure-JAX reference (XLA, dense over the whole cache), and `jspec.models.decoder.attend` with a
precomputed dense [B, T, S] mask; on GPUs also the other layout of the Triton-lowered kernel and the Mosaic GPU kernel
(gpu_mosaic.py), both checked against the reference. Each timing chains `--chain` calls (each call's output is the
next call's query) in one jitted function so launch overhead is amortised; the median over `--repeats` runs is
reported per call, XLA ops around the kernel included. `--kernel-time` adds the Pallas kernel's own device time from
a profile. Bandwidth = K/V bytes below `start` / time, also as a share of the device copy bandwidth measured in the
same run. Prints a markdown table and writes tree_attention_speed.json under --out.
"""

import argparse
import itertools
import json
import pathlib
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.trace_summary import summarize  # noqa: E402
from jspec.models.cache import BlockMask  # noqa: E402
from pallas_kernels.tree_attention.gpu import default_layout as tree_attention_gpu_layout  # noqa: E402
from pallas_kernels.tree_attention.gpu import tree_attention_gpu  # noqa: E402
from pallas_kernels.tree_attention.gpu_mosaic import tree_attention_mosaic  # noqa: E402
from pallas_kernels.tree_attention.gpu_mosaic import unsupported as mosaic_unsupported  # noqa: E402
from pallas_kernels.tree_attention.reference import tree_attention_reference  # noqa: E402
from pallas_kernels.tree_attention.testing import random_tree_masks  # noqa: E402
from pallas_kernels.tree_attention.tpu import tree_attention_tpu  # noqa: E402

FULL = dict(heads=12, kv_heads=2, head_dim=128, contexts=(2048, 8192, 32768), chain=20, repeats=30, batch=1)
SMOKE = dict(heads=4, kv_heads=2, head_dim=64, contexts=(192, 320), chain=2, repeats=3, batch=1)
# --sweep: GPU kernel tuning grid at T = 60 (None: the kernel's heuristic)
SWEEP = {"layout": ("heads", "packed"), "block_k": (32, 64, 128), "num_splits": (None, 1, 8, 32), "num_warps": (4, 8)}
# Called directly, not through the dispatcher: a silent fallback to the reference would make the timing meaningless.
KERNELS = {"gpu": tree_attention_gpu, "tpu": tree_attention_tpu}


def attend(q, k, v, mask):
    """Dense-mask XLA attention (the baseline a kernel must beat): GQA softmax in f32 under a [B, T, S] mask."""
    b, t, h, d = q.shape
    qg = q.reshape(b, t, k.shape[2], h // k.shape[2], d)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32) * d**-0.5
    probs = jax.nn.softmax(jnp.where(mask[:, None, None], scores, -jnp.inf), axis=-1)
    return jnp.einsum("bkgts,bskd->btkgd", probs.astype(v.dtype), v).reshape(b, t, h, d)


def chained(fn, n: int):
    """One jitted function running fn n times, each on the previous output, so the calls cannot overlap or fold."""

    @jax.jit
    def run(q, *args):
        for _ in range(n):
            q = fn(q, *args)
        return q

    return run


def time_per_call(fn, args, chain: int, repeats: int) -> float:
    run = chained(fn, chain)
    jax.block_until_ready(run(*args))  # compile + warm-up
    jax.block_until_ready(run(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(*args))
        times.append((time.perf_counter() - t0) / chain)
    return statistics.median(times)


def make_case(rng: np.random.Generator, t: int, context: int, capacity: int, cfg: dict, dtype):
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 3)
    b, h, kv, d = cfg["batch"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q = jax.random.normal(keys[0], (b, t, h, d), dtype)
    k = jax.random.normal(keys[1], (b, capacity, kv, d), dtype)
    v = jax.random.normal(keys[2], (b, capacity, kv, d), dtype)
    block = jnp.asarray(random_tree_masks(rng, b, t))
    return q, k, v, jnp.full((b,), context, jnp.int32), block


def kernel_only_time(fn, args, chain: int) -> float:
    """Device seconds per call of the Pallas kernel alone (the `tree_attention*` kernels in a profile of one chain),
    without the XLA ops around it: the kernel's own K/V read rate."""
    run = chained(fn, chain)
    jax.block_until_ready(run(*args))
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            jax.block_until_ready(run(*args))
        kernels = summarize(trace_dir).kernels
    us = sum(k.total_us for k in kernels if k.name.startswith("tree_attention"))
    if not us:
        raise RuntimeError(f"no tree_attention kernel in the profile (kernels: {[k.name for k in kernels[:8]]})")
    return us / chain / 1e6


def copy_bandwidth(repeats: int) -> float:
    """Device copy bandwidth in GB/s (bytes read + written), the ceiling the kernel's K/V read is compared with. A
    4 GiB pass: on the H200 a 1 GiB one reads 20-35% lower (3.7 against 2.4-3.1 TB/s)."""
    x = jnp.ones((1 << 31,), jnp.bfloat16)
    sec = time_per_call(lambda a: a * 1.0001, (x,), 1, repeats)  # chained passes would fuse into one
    return 2 * x.nbytes / sec / 1e9


def bench_case(t: int, context: int, capacity: int, cfg: dict, kernel: str, interpret: bool, sweep: bool,
               rng, splits: tuple[int, ...] = (), kernel_time: bool = False, skip: tuple[str, ...] = ()) -> dict:
    q, k, v, start, block = make_case(rng, t, context, capacity, cfg, jnp.bfloat16)
    dense = BlockMask(start, block).dense(capacity)
    fns = {
        "kernel": lambda q, k, v, s, b, m: KERNELS[kernel](q, k, v, s, b, interpret=interpret),
        "reference": lambda q, k, v, s, b, m: tree_attention_reference(q, k, v, s, b),
        "dense_attend": lambda q, k, v, s, b, m: attend(q, k, v, m),
    }
    if kernel == "gpu":  # the default layout for this T against the other one, and the Mosaic GPU kernel
        other = "packed" if tree_attention_gpu_layout(t) == "heads" else "heads"
        fns["kernel_other_layout"] = lambda q, k, v, s, b, m: tree_attention_gpu(q, k, v, s, b, layout=other,
                                                                                 interpret=interpret)
        if mosaic_unsupported(q, k) is None and not interpret:
            fns["mosaic"] = lambda q, k, v, s, b, m: tree_attention_mosaic(q, k, v, s, b)
    fns = {name: fn for name, fn in fns.items() if name not in skip}
    args = (q, k, v, start, block, dense)
    ref = np.asarray(jax.jit(fns["reference"])(*args), np.float32)
    errs = {}
    for name in [n for n in fns if n.startswith(("kernel", "mosaic"))]:
        out = np.asarray(jax.jit(fns[name])(*args), np.float32)
        errs[name] = float(np.max(np.abs(out - ref)))
        if not np.allclose(out, ref, rtol=2e-2, atol=2e-2):
            raise AssertionError(f"{name} != reference at T={t} context={context}: max abs err {errs[name]}")
    kv_bytes = cfg["batch"] * 2 * context * cfg["kv_heads"] * cfg["head_dim"] * 2
    # FLOP per K/V byte (QK^T and PV): above the GPU's ridge point (~200 on an H200) the kernel is compute-bound and
    # cannot read the cache at full bandwidth whatever its schedule.
    intensity = 4 * t * cfg["heads"] * cfg["head_dim"] / (2 * cfg["kv_heads"] * cfg["head_dim"] * 2)
    row = {"T": t, "batch": cfg["batch"], "context": context, "capacity": capacity, "kv_bytes": kv_bytes,
           "flop_per_byte": intensity, "max_abs_err": errs,
           "layout": tree_attention_gpu_layout(t) if kernel == "gpu" else None}
    for name, fn in fns.items():
        sec = time_per_call(fn, args, cfg["chain"], cfg["repeats"])
        row[f"{name}_us"] = sec * 1e6
        row[f"{name}_GBps"] = kv_bytes / sec / 1e9
    if kernel_time:
        sec = kernel_only_time(fns["kernel"], args, cfg["chain"])
        row["kernel_only_us"], row["kernel_only_GBps"] = sec * 1e6, kv_bytes / sec / 1e9
    if sweep:
        row["sweep"] = sweep_gpu(args, cfg)
    if splits:
        row["splits"] = time_splits(args, cfg, splits, interpret)
    return row


def time_splits(args: tuple, cfg: dict, splits: tuple[int, ...], interpret: bool) -> list[dict]:
    """The GPU kernel at each given split count, everything else at its heuristic (full chains: for reporting)."""
    rows = []
    for n in splits:
        def fn(q, k, v, s, b, m, n=n):
            return tree_attention_gpu(q, k, v, s, b, num_splits=n, interpret=interpret)

        rows.append({"num_splits": n, "us": time_per_call(fn, args, cfg["chain"], cfg["repeats"]) * 1e6})
    print("  µs per call by split count: " + " ".join(f"{r['num_splits']}:{r['us']:.1f}" for r in rows))
    return rows


def sweep_gpu(args: tuple, cfg: dict) -> list[dict]:
    """Kernel time over the SWEEP grid (shorter chains: this is for choosing defaults, not for reporting)."""
    rows = []
    for values in itertools.product(*SWEEP.values()):
        tuning = dict(zip(SWEEP, values))

        def fn(q, k, v, s, b, m, tuning=tuning):
            return tree_attention_gpu(q, k, v, s, b, **tuning)

        sec = time_per_call(fn, args, cfg["chain"] // 2, cfg["repeats"] // 3)
        rows.append({**tuning, "us": sec * 1e6})
    rows.sort(key=lambda r: r["us"])
    print("  sweep, fastest first (" + "/".join(SWEEP) + ": µs): "
          + " ".join("/".join(str(r[k]) for k in SWEEP) + f":{r['us']:.1f}" for r in rows[:8]))
    return rows


def markdown(rows: list[dict], copy_gbps: float | None) -> str:
    cols = ["T", "batch", "context", "capacity", "layout", "FLOP/byte", "kernel µs", "GB/s", "% of copy bw",
            "kernel alone µs", "GB/s", "% of copy bw",
            "reference µs", "GB/s", "dense attend µs", "GB/s", "speedup vs ref", "other layout µs", "mosaic µs"]
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        cells = [r["T"], r["batch"], r["context"], r["capacity"], r["layout"] or "", f"{r['flop_per_byte']:.0f}"]
        for name in ("kernel", "reference", "dense_attend"):
            timed = f"{name}_us" in r
            cells += [f"{r[f'{name}_us']:.1f}" if timed else "", f"{r[f'{name}_GBps']:.0f}" if timed else ""]
            if name == "kernel":
                cells.append(f"{100 * r['kernel_GBps'] / copy_gbps:.0f}%" if copy_gbps else "")
                alone = "kernel_only_us" in r
                cells += [f"{r['kernel_only_us']:.1f}" if alone else "",
                          f"{r['kernel_only_GBps']:.0f}" if alone else "",
                          f"{100 * r['kernel_only_GBps'] / copy_gbps:.0f}%" if alone and copy_gbps else ""]
        cells.append(f"{r['reference_us'] / r['kernel_us']:.2f}x")
        cells.append(f"{r['kernel_other_layout_us']:.1f}" if "kernel_other_layout_us" in r else "")
        cells.append(f"{r['mosaic_us']:.1f}" if "mosaic_us" in r else "")
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, kernel in interpret mode (CPU check)")
    ap.add_argument("--kernel", choices=("gpu", "tpu"), help="default: the default backend's kernel (gpu on CPU)")
    ap.add_argument("--contexts", help="comma-separated context lengths")
    ap.add_argument("--capacity", type=int, default=0, help="cache slots (default: context + 128)")
    ap.add_argument("--tokens", default="60,1", help="comma-separated query counts T (60: Token Recycling's tree, "
                    "16: a DFlash block, 1: decode)")
    ap.add_argument("--batch", type=int, default=1, help="batch rows, each holding `context` tokens")
    ap.add_argument("--kernel-time", action="store_true", help="also profile each case for the kernel's own device "
                    "time, without the XLA ops around it (GPU)")
    ap.add_argument("--skip", default="", help="comma-separated timings to leave out (dense_attend, "
                    "kernel_other_layout, mosaic), each of which costs its compile time")
    ap.add_argument("--sweep", action="store_true", help="also time the GPU kernel at T = 60 over the SWEEP grid")
    ap.add_argument("--splits", help="also time the GPU kernel at T = 60 with each of these comma-separated split "
                    "counts (the rest at its heuristic)")
    args = ap.parse_args()
    unknown = set(filter(None, args.skip.split(","))) - {"dense_attend", "kernel_other_layout", "mosaic"}
    if unknown:
        ap.error(f"--skip: unknown timings {sorted(unknown)} (choose from dense_attend, kernel_other_layout, mosaic)")
    cfg = dict(SMOKE if args.smoke else FULL)
    if args.contexts:
        cfg["contexts"] = tuple(int(c) for c in args.contexts.split(","))
    cfg["batch"] = args.batch
    kernel = args.kernel or (jax.default_backend() if jax.default_backend() in ("gpu", "tpu") else "gpu")
    interpret = args.smoke or jax.default_backend() != kernel
    rng = np.random.default_rng(0)
    splits = tuple(int(n) for n in args.splits.split(",")) if args.splits and kernel == "gpu" else ()
    rows = []
    for t in (int(n) for n in args.tokens.split(",")):
        for c in cfg["contexts"]:
            started = time.perf_counter()
            rows.append(bench_case(t, c, args.capacity or c + 128, cfg, kernel, interpret,
                                   args.sweep and t == 60 and not interpret, rng, splits if t == 60 else (),
                                   args.kernel_time and not interpret,
                                   tuple(n for n in args.skip.split(",") if n)))
            alone = f", alone {rows[-1]['kernel_only_us']:.1f}" if "kernel_only_us" in rows[-1] else ""
            print(f"T={t} context={c}: kernel {rows[-1]['kernel_us']:.1f} µs{alone} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    copy_gbps = None if interpret else copy_bandwidth(cfg["repeats"])
    table = markdown(rows, copy_gbps)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__, "kernel": kernel,
            "copy_GBps": copy_gbps,
            "interpret": interpret, "config": {k: v for k, v in cfg.items()}}
    (args.out / "tree_attention_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
