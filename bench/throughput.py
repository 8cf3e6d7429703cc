"""Batched throughput of decoding methods on a real model: generated tokens per second at several batch sizes.

    python bench/throughput.py --model qwen2.5-coder-1.5b --methods vanilla,token_recycling --batch-sizes 1,4,8,16 \
        --dataset humaneval --max-new-tokens 256 --out OUT_DIR

Each batch takes the first `batch` prompts of the dataset, padded to one width; a first call with the same shapes
compiles (and, for retrieval methods, warms the method state, which the timed call then starts from; with
`--method-state METHOD=PATH` the warm-up call starts from a saved state, e.g. graft's calibrated thresholds). Throughput
counts every token the rows generated (rows stop at EOS independently) over the wall time of the timed call.
Prints a table and writes `throughput.json` + `throughput.png` under --out.
"""

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.method_args import add_method_arguments, built_methods  # noqa: E402
from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.models.loading import load_model  # noqa: E402
from jspec.runner import run_batch  # noqa: E402
from jspec.sampling import Sampling  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    add_method_arguments(ap, "vanilla,token_recycling")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    model = load_model(args.model, dtype=args.dtype)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    prompts = [p["ids"] for p in _encode(model, load_prompts(args.dataset, max(sizes)), 1024)]
    width = -(-max(len(p) for p in prompts) // 64) * 64
    kw = dict(max_new_tokens=args.max_new_tokens, sampling=Sampling(), max_cache_len=width + args.max_new_tokens + 128,
              pad_to=width)
    rows = []
    for name, method, params, saved in built_methods(args, model):
        for b in sizes:
            batch = prompts[:b]
            _, state = run_batch(model, method, batch, seed=0, method_params=params,
                                 method_state=jax.tree.map(jnp.copy, saved), **kw)  # a call consumes its state
            records, _ = run_batch(model, method, batch, seed=0, method_params=params, method_state=state, **kw)
            tokens = sum(r["new_tokens"] for r in records)
            steps = sum(r["steps"] for r in records)
            seconds = records[0]["seconds"]
            rows.append({"method": name, "batch": b, "tokens": tokens, "seconds": seconds,
                         "tok_per_s": tokens / seconds, "mat": tokens / steps})
            print(f"{name:16s} batch {b:3d}  {tokens / seconds:9.1f} tok/s  MAT {tokens / steps:5.2f}", flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "model": args.model, "dtype": args.dtype, "dataset": args.dataset,
              "max_new_tokens": args.max_new_tokens, "command": " ".join(sys.argv), "rows": rows}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "throughput.json").write_text(json.dumps(report, indent=2))
    plot(rows, out / "throughput.png", f"{args.model} {args.dtype}, {report['device']}")


def plot(rows: list[dict], path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name in dict.fromkeys(r["method"] for r in rows):
        pts = [(r["batch"], r["tok_per_s"]) for r in rows if r["method"] == name]
        ax.plot(*zip(*pts), marker="o", label=name)
    ax.set_xlabel("batch size")
    ax.set_ylabel("generated tok/s")
    ax.set_title(title, fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
