"""Token Recycling adjacency update: fused Pallas top-k kernel vs `jax.lax.top_k`, then the same row scatter.

    python bench/adjacency_update_speed.py --out OUT_DIR            # GPU: V=151936, k=8, N=60, B=1,16, f32/bf16
    python bench/adjacency_update_speed.py --smoke --out OUT_DIR    # tiny shapes, kernels in interpret mode (CPU)

Every kernel result is checked for exact index equality with the reference before it is timed. Times are medians
of `--reps` repetitions, each the mean over `--inner` calls chained inside one jitted loop (device time, no host
dispatch in between).
Prints a markdown table and writes `adjacency_update_speed.json` under --out.
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
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from pallas_kernels.adjacency_update import kernel, scatter_rows, topk_reference  # noqa: E402


def timeit(step, init, consts, reps: int, inner: int) -> float:
    """Median seconds per `carry = step(carry, *consts)`, run `inner` times inside one jitted loop.

    Host dispatch (~tens of us per call) would otherwise hide the small kernels; the optimisation barrier ties each
    call's inputs to the previous call's output, so XLA cannot hoist or merge the repeated work.
    """

    def body(_, carry):
        carry, args = jax.lax.optimization_barrier((carry, consts))
        return step(carry, *args)

    loop = jax.jit(lambda c, *a: jax.lax.fori_loop(0, inner, body, c))
    jax.block_until_ready(loop(init, *consts))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(loop(init, *consts))
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def kernel_configs(args) -> list[tuple[str, dict]]:
    if args.smoke:
        return [("gpu-interpret", dict(block_v=256, interpret=True)), ("tpu-interpret", dict(block_v=256,
                                                                                            interpret=True))]
    flavour = "tpu" if jax.default_backend() == "tpu" else "gpu"
    configs = []
    for block_v, warps in itertools.product(args.block_v, args.num_warps):
        kw = dict(block_v=block_v) if flavour == "tpu" else dict(block_v=block_v, num_warps=warps)
        if args.splits and flavour == "gpu":
            kw["splits"] = args.splits
        configs.append((flavour, kw))
    return list({str(c): c for c in configs}.values())  # the TPU kernel ignores num_warps


def topk_fn(flavour: str, kw: dict, k: int):
    fn = kernel.topk_tpu if flavour.startswith("tpu") else kernel.topk_gpu
    return jax.jit(lambda x: fn(x, k=k, **kw))


def bench_case(b: int, n: int, vocab: int, k: int, dtype, args) -> list[dict]:
    m = b * n
    key_logits, key_tok = jax.random.split(jax.random.key(b * 1000 + n))
    logits = jax.random.normal(key_logits, (m, vocab), jnp.float32).astype(dtype)
    tokens = jax.random.randint(key_tok, (m,), 0, vocab)
    valid = jnp.ones((m,), bool)
    table = jnp.zeros((vocab, k), jnp.int32)
    ref_topk = jax.jit(lambda x: topk_reference(x, k))
    expect = np.asarray(ref_topk(logits))
    bytes_read = logits.size * logits.dtype.itemsize
    case = dict(B=b, N=n, V=vocab, k=k, dtype=jnp.dtype(dtype).name)
    rows = []

    def record(impl: str, config: dict, topk, equal: bool):
        t_topk = timeit(lambda _, x: topk(x), topk(logits), (logits,), args.reps, args.inner)
        # The table is the loop carry, updated in place from call to call as in the decode loop.
        t_update = timeit(lambda t, x: scatter_rows(t, tokens, valid, topk(x)), table, (logits,), args.reps,
                          args.inner)
        rows.append(dict(case, impl=impl, config=config, equal=equal, topk_us=1e6 * t_topk,
                         update_us=1e6 * t_update, topk_gb_s=bytes_read / t_topk / 1e9))

    record("reference", {}, ref_topk, True)
    for flavour, kw in kernel_configs(args):
        fn = topk_fn(flavour, kw, k)
        got = np.asarray(fn(logits))
        equal = bool(np.array_equal(got, expect))
        if not equal:
            bad = np.nonzero((got != expect).any(axis=1))[0]
            print(f"MISMATCH {case} {flavour} {kw}: {len(bad)} rows differ, e.g. row {bad[0]}: "
                  f"{got[bad[0]].tolist()} vs {expect[bad[0]].tolist()}", file=sys.stderr)
        record(f"kernel-{flavour}", {k_: v for k_, v in kw.items() if k_ != "interpret"}, fn, equal)
    return rows


def markdown(rows: list[dict]) -> str:
    head = "| B | N | V | dtype | impl | config | equal | top-k us | update us | top-k GB/s |\n" + "|---" * 10 + "|"
    lines = [f"| {r['B']} | {r['N']} | {r['V']} | {r['dtype']} | {r['impl']} | "
             f"{' '.join(f'{a}={v}' for a, v in r['config'].items())} | {r['equal']} | {r['topk_us']:.1f} | "
             f"{r['update_us']:.1f} | {r['topk_gb_s']:.0f} |" for r in rows]
    return "\n".join([head, *lines])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, kernels in interpret mode (runs on CPU)")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--nodes", type=int, default=60)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--block-v", type=lambda s: [int(x) for x in s.split(",")], default=[2048])
    ap.add_argument("--num-warps", type=lambda s: [int(x) for x in s.split(",")], default=[4])
    ap.add_argument("--splits", type=int, default=None, help="GPU vocabulary chunks per row (default: heuristic)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--inner", type=int, default=50)
    args = ap.parse_args()
    if args.smoke:
        args.vocab, args.nodes, args.batches, args.reps, args.inner = 1000, 6, "1,2", 2, 1
    elif jax.default_backend() not in ("gpu", "cuda", "rocm", "tpu"):
        sys.exit("needs a GPU or TPU (or pass --smoke)")
    rows = []
    for b, dtype in itertools.product([int(x) for x in args.batches.split(",")], args.dtypes.split(",")):
        rows += bench_case(b, args.nodes, args.vocab, 8, jnp.dtype(dtype), args)
    print(markdown(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    result = dict(device=str(jax.devices()[0].device_kind), backend=jax.default_backend(), jax=jax.__version__,
                  smoke=args.smoke, rows=rows)
    (args.out / "adjacency_update_speed.json").write_text(json.dumps(result, indent=1))
    if not all(r["equal"] for r in rows):
        sys.exit("kernel and reference disagree")


if __name__ == "__main__":
    main()
