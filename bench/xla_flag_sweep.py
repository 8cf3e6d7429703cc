"""Batch-1 step times of a preset under several XLA_FLAGS settings (one subprocess each).

    python bench/xla_flag_sweep.py --model qwen2.5-coder-1.5b --out OUT_DIR               # vanilla decode loop
    python bench/xla_flag_sweep.py --bench step --variants default,exhaustive_tiling,no_triton_gemm --out OUT_DIR

`--bench step` times decode and the 60-slot Token Recycling verification with `bench/step_breakdown.py` (random
weights, context 300): the flags that change how XLA tiles the M = 60 products show up in verify, not in decode.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

VARIANTS = {
    "default": "",
    "no_command_buffer": "--xla_gpu_enable_command_buffer=",
    "graphs_incl_while": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL "
                         "--xla_gpu_graph_min_graph_size=1",
    "exhaustive_tiling": "--xla_gpu_exhaustive_tiling_search=true",
    "no_triton_gemm": "--xla_gpu_enable_triton_gemm=false",
}


def run_variant(bench: str, model: str, out: pathlib.Path, env: dict) -> dict:
    here = pathlib.Path(__file__).parent
    if bench == "decode":
        cmd = [sys.executable, str(here / "vanilla_speed.py"), "--model", model, "--batches", "1",
               "--prefill-len", "128", "--out", str(out)]
    else:
        cmd = [sys.executable, str(here / "step_breakdown.py"), "--model", model, "--weights", "random", "--methods",
               "token_recycling", "--contexts", "300", "--parts", "decode,verify", "--reps", "5", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-600:]}
    if bench == "decode":
        r = json.loads((out / "vanilla_speed.json").read_text())["decode"][0]
        return {"ms_per_step": r["ms_per_step"], "tok_s": r["decode_tok_s"]}
    r = json.loads((out / "step_breakdown.json").read_text())["ms_per_step"][0]
    return {"decode_ms": r["decode"], "verify_ms": r["verify"], "verify_over_decode": r["verify"] / r["decode"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--out", default=".")
    ap.add_argument("--variants", default="default,no_command_buffer,graphs_incl_while")
    ap.add_argument("--bench", choices=("decode", "step"), default="decode")
    args = ap.parse_args()
    if unknown := set(args.variants.split(",")) - set(VARIANTS):
        ap.error(f"unknown variants {sorted(unknown)}; known: {','.join(VARIANTS)}")
    results = {}
    for name in args.variants.split(","):
        env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + VARIANTS[name]).strip())
        results[name] = run_variant(args.bench, args.model, pathlib.Path(args.out) / name, env)
        print(name, results[name], flush=True)
    (pathlib.Path(args.out) / f"xla_flag_sweep_{args.bench}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
