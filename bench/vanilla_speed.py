"""Vanilla decode speed of a target model: ms/step and tok/s at batch 1/8/16, 2K prefill, compile time, peak memory.

    python bench/vanilla_speed.py --model qwen2.5-coder-1.5b --weights random --out OUT_DIR

`--weights random` builds the preset's exact architecture with random bf16 weights: decode time does not depend on
weight values (EOS is disabled so every row runs the full length). `--weights real` loads the installed GGUF.
Prints a table and writes `vanilla_speed.json` under --out.
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from jspec import decode  # noqa: E402
from jspec.config import model_preset  # noqa: E402
from jspec.models.decoder import Decoder  # noqa: E402
from jspec.sampling import Sampling  # noqa: E402


def copy_bandwidth(n_bytes: int = 4 << 30) -> float:
    """Device-to-device copy rate in bytes/s (read + write), our practical HBM ceiling."""
    x = jnp.ones((n_bytes // 4,), jnp.float32)
    f = jax.jit(lambda a: a * 1.0001)
    f(x).block_until_ready()
    times = []
    for _ in range(10):
        t = time.perf_counter()
        f(x).block_until_ready()
        times.append(time.perf_counter() - t)
    return 2 * n_bytes / statistics.median(times)


def make_params(name: str, weights: str, dtype):
    if weights == "real":
        from jspec.models.loading import load_model

        m = load_model(name, dtype="bfloat16" if dtype == jnp.bfloat16 else "float32")
        return m.cfg, m.graphdef, m.params
    cfg = model_preset(name).config
    graphdef, params = nnx.split(Decoder(cfg, dtype=dtype, rngs=nnx.Rngs(0)))
    return cfg, graphdef, params


def run_decode(graphdef, params, cfg, batch, prompt_len, new_tokens, cache_len, repeats=3):
    rng = np.random.default_rng(batch)
    prompts = [rng.integers(100, cfg.vocab_size - 100, size=prompt_len).tolist() for _ in range(batch)]
    kw = dict(max_new_tokens=new_tokens, sampling=Sampling(), eos_ids=(), max_cache_len=cache_len)
    t = time.perf_counter()
    first = decode.generate(graphdef, params, prompts, **kw)
    first_call = time.perf_counter() - t
    runs = [decode.generate(graphdef, params, prompts, **kw) for _ in range(repeats)]
    assert all(len(r) == new_tokens for r in runs[0].tokens), "every row must run the full length"
    dec = statistics.median(r.decode_seconds for r in runs)
    pre = statistics.median(r.prefill_seconds for r in runs)
    steps = new_tokens - 1  # the first token comes from prefill
    return {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens, "cache_len": cache_len,
            "ms_per_step": 1e3 * dec / steps, "decode_tok_s": batch * steps / dec,
            "end_to_end_tok_s": batch * new_tokens / (dec + pre), "prefill_ms": 1e3 * pre,
            "first_call_s": first_call, "compile_s_estimate": first_call - (dec + pre), "_": len(first.tokens)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--weights", choices=("random", "real"), default="random")
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--prompt-len", type=int, default=100)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prefill-len", type=int, default=2048)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()

    dev = jax.devices()[0]
    cfg, graphdef, params = make_params(args.model, args.weights, jnp.bfloat16)
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    cache_len = 512
    rows = [run_decode(graphdef, params, cfg, int(b), args.prompt_len, args.new_tokens, cache_len)
            for b in args.batches.split(",")]
    prefill = run_decode(graphdef, params, cfg, 1, args.prefill_len, 2, args.prefill_len + 64, repeats=3)
    stats = dev.memory_stats() or {}  # read before the bandwidth probe allocates its 8 GB
    bw = copy_bandwidth()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {
        "date": time.strftime("%Y-%m-%d"), "device": dev.device_kind, "jax": jax.__version__, "commit": commit,
        "python": platform.python_version(), "model": args.model, "weights": args.weights, "dtype": "bfloat16",
        "weight_bytes": weight_bytes, "copy_bandwidth_GBs": bw / 1e9,
        "floor_ms_at_4.1TBs": 1e3 * weight_bytes / 4.1e12, "floor_ms_at_measured_bw": 1e3 * weight_bytes / bw,
        "decode": rows, "prefill_2k_ms": prefill["prefill_ms"], "prefill_2k_first_call_s": prefill["first_call_s"],
        "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "command": " ".join(sys.argv),
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vanilla_speed.json").write_text(json.dumps(report, indent=2))
    print(f"{dev.device_kind}  jax {jax.__version__}  {args.model} ({args.weights} weights, bf16), "
          f"weights {weight_bytes / 1e9:.2f} GB, copy bw {bw / 1e12:.2f} TB/s, floor "
          f"{report['floor_ms_at_4.1TBs']:.2f} ms (4.1 TB/s) / {report['floor_ms_at_measured_bw']:.2f} ms (measured)")
    print("| batch | ms/step | decode tok/s | end-to-end tok/s | prefill ms (100 tok) | first call s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['ms_per_step']:.2f} | {r['decode_tok_s']:.0f} | {r['end_to_end_tok_s']:.0f} | "
              f"{r['prefill_ms']:.1f} | {r['first_call_s']:.1f} |")
    print(f"prefill {args.prefill_len} tokens: {report['prefill_2k_ms']:.1f} ms; peak memory of decode + prefill "
          f"{(report['peak_bytes_in_use'] or 0) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
