"""Kernel profile of the real decode loop, as `jspec bench` runs it: one prompt, the same padding and cache size.

    python bench/loop_profile.py --model qwen2.5-coder-1.5b --methods vanilla,token_recycling --out OUT_DIR

`bench/step_breakdown.py` times a method's step in a fixed-trip loop; the bench's own loop has measured slower per
step (2026-11-30 records: Token Recycling 2.33–2.45 ms against 2.12–2.36 ms). This script runs one bench prompt
through `jspec.runner.run_batch` (compiled first, then traced once with jax.profiler) and writes, per method,
`loop_<method>.md`: the device kernels per target step, device busy time against wall span (host gaps), and the
prefill / loop / host split of the call.
"""

import argparse
import json
import pathlib
import sys
import tempfile

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.method_args import add_method_arguments, built_methods  # noqa: E402
from bench.trace_summary import format_table, summarize  # noqa: E402
from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.models.loading import load_model  # noqa: E402
from jspec.runner import run_batch  # noqa: E402
from jspec.sampling import Sampling  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_method_arguments(ap, "vanilla,token_recycling")
    ap.add_argument("--prompt", type=int, default=0, help="which prompt of --dataset")
    ap.add_argument("--width-datasets", default="humaneval,gsm8k,mtbench",
                    help="datasets whose 20 first prompts set the padded width, as in `bash bench/h200_issue3.sh tr`")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--top", type=int, default=25, help="kernels listed one by one (the rest are summed)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("."))
    args = ap.parse_args()
    model = load_model(args.model, dtype=args.dtype)
    prompts = _encode(model, load_prompts(args.dataset, args.prompt + 1), 1024)
    if args.prompt >= len(prompts):
        ap.error(f"--prompt {args.prompt}: {args.dataset} has {len(prompts)} usable prompts")
    ids = prompts[args.prompt]["ids"]
    widest = max(len(p["ids"]) for d in args.width_datasets.split(",")
                 for p in _encode(model, load_prompts(d, 20), 1024))
    width = -(-max(widest, len(ids)) // 64) * 64  # the bench's padded width and cache size
    cache_len = width + args.max_new_tokens + 128
    device = "/device:GPU:0" if jax.devices()[0].platform == "gpu" else "/host:CPU"
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name, method, params, state in built_methods(args, model):
        kw = dict(max_new_tokens=args.max_new_tokens, sampling=Sampling(), seed=0, max_cache_len=cache_len,
                  method_params=params, pad_to=width)
        _, state = run_batch(model, method, [ids], method_state=state, **kw)  # compile (consumes the state)
        with tempfile.TemporaryDirectory() as trace_dir:
            with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                [rec], _ = run_batch(model, method, [ids], method_state=state, **kw)
            table = format_table(summarize(trace_dir, device), rec["steps"], args.top)
        loop_ms = 1e3 * rec["loop_seconds"] / max(rec["steps"] - 1, 1)
        split = (f"{rec['steps']} target steps, MAT {rec['mat']:.2f}; prefill {1e3 * rec['prefill_seconds']:.1f} ms, "
                 f"loop {1e3 * rec['loop_seconds']:.1f} ms ({loop_ms:.3f} ms / step), host "
                 f"{1e3 * (rec['seconds'] - rec['prefill_seconds'] - rec['loop_seconds']):.1f} ms; traced run")
        (args.out / f"loop_{name}.md").write_text(
            f"# {name}: {args.dataset} prompt {args.prompt} ({len(ids)} tokens, padded to {width}, cache {cache_len}),"
            f" {jax.devices()[0].device_kind}\n\n{split}\n\nPer target step (the prefill's kernels included):\n\n"
            f"{table}\n")
        summary[name] = {"steps": rec["steps"], "mat": rec["mat"], "loop_ms_per_step": loop_ms,
                         "prefill_ms": 1e3 * rec["prefill_seconds"], "seconds": rec["seconds"]}
        print(name, json.dumps(summary[name]), flush=True)
    (args.out / "loop_profile.json").write_text(json.dumps(
        {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "command": " ".join(sys.argv),
         "cache_len": cache_len, "width": width, "methods": summary}, indent=2))


if __name__ == "__main__":
    main()
