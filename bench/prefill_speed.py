"""The prefill call of each method, timed as the bench times it, and alone.

    python bench/prefill_speed.py --model qwen2.5-coder-1.5b --methods vanilla,token_recycling --out OUT_DIR

On the H200, Token Recycling's prefill call measured 1.5-2.5 ms longer than vanilla's on the same padded prompts
(docs/results/2026-12-01-session12-h200.md), while on the CPU both take the same time and compile to the same heavy
ops. Per method this prints:
- `in_bench`: `prefill_seconds` of `jspec.runner.run_batch` on the first `--prompts` prompts of `--dataset`, each
  call after the previous prompt's decode loop, as in `jspec bench` (median over the prompts);
- `alone`: the same prefill call repeated back to back on the first prompt, no decode loop in between (median).
A gap in `in_bench` that `alone` does not show comes from what the decode loop leaves behind (buffers freed late,
clocks), not from the prefill's own work. `--profile` traces one bench-style call per method into OUT_DIR/trace_*
(open with Perfetto or TensorBoard).
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.method_args import add_method_arguments, built_methods  # noqa: E402
from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.decode import _prefill_jit as vanilla_prefill, pad_prompts  # noqa: E402
from jspec.methods import Method  # noqa: E402
from jspec.models.loading import load_model  # noqa: E402
from jspec.runner import run_batch  # noqa: E402
from jspec.sampling import Sampling  # noqa: E402
from jspec.spec_decode import _prefill_jit as spec_prefill  # noqa: E402


def prefill_alone(model, method, params, state, ids: list[int], width: int, cache_len: int, max_new: int,
                  reps: int) -> float:
    """Median seconds of the prefill call of `method` (dispatch + device work), repeated back to back."""
    tokens, lens = pad_prompts([ids], cache_len, width=width)
    tokens, lens = jnp.asarray(tokens), jnp.asarray(lens)
    dtype = jax.tree.leaves(model.params)[0].dtype
    common = dict(sampling=Sampling(), max_new_tokens=max_new, eos_ids=tuple(model.eos_token_ids),
                  max_cache_len=cache_len, cache_dtype=dtype)
    if type(method) is Method:
        def call():
            return vanilla_prefill(model.graphdef, model.params, tokens, lens, jax.random.key(0), **common)
    else:
        held = [method.init_state(params, 1, cache_len) if state is None else state]

        def call():  # the prefill consumes (donates) the method state: pass on the one it returns
            out = spec_prefill(model.graphdef, model.params, tokens, lens, jax.random.key(0), params, held[0],
                               method=method, **common)
            held[0] = out.method_state
            return out
    jax.block_until_ready(call())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    add_method_arguments(ap, "vanilla,token_recycling")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    model = load_model(args.model, dtype=args.dtype)
    prompts = _encode(model, load_prompts(args.dataset, args.prompts), 1024)
    width = -(-max(len(p["ids"]) for p in prompts) // 64) * 64  # the bench's padding and cache size
    cache_len = width + args.max_new_tokens + 128
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, method, params, saved in built_methods(args, model):
        kw = dict(max_new_tokens=args.max_new_tokens, sampling=Sampling(), max_cache_len=cache_len,
                  method_params=params, pad_to=width)
        state = saved
        _, state = run_batch(model, method, [prompts[0]["ids"]], seed=0, method_state=state, **kw)  # compile
        in_bench = []
        for i, p in enumerate(prompts):
            [rec], state = run_batch(model, method, [p["ids"]], seed=i, method_state=state, **kw)
            in_bench.append(rec["prefill_seconds"])
        if args.profile:
            with jax.profiler.trace(str(out / f"trace_{name}"), create_perfetto_trace=True):
                _, state = run_batch(model, method, [prompts[0]["ids"]], seed=0, method_state=state, **kw)
        alone = prefill_alone(model, method, params, state, prompts[0]["ids"], width, cache_len,
                              args.max_new_tokens, args.reps)
        rows.append({"method": name, "in_bench_ms": 1e3 * statistics.median(in_bench), "alone_ms": 1e3 * alone,
                     "in_bench_ms_each": [1e3 * s for s in in_bench]})
        print(f"{name}: prefill in the bench {rows[-1]['in_bench_ms']:.2f} ms, alone {rows[-1]['alone_ms']:.2f} ms",
              flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "device": jax.devices()[0].device_kind, "model": args.model,
              "dtype": args.dtype, "dataset": args.dataset, "width": width, "cache_len": cache_len,
              "command": " ".join(sys.argv), "rows": rows}
    (out / "prefill_speed.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
