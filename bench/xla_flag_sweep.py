"""Batch-1 decode ms/step of a preset under several XLA_FLAGS settings (one subprocess each).

    python bench/xla_flag_sweep.py --model qwen2.5-coder-1.5b --out OUT_DIR
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
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--out", default=".")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    bench = pathlib.Path(__file__).with_name("vanilla_speed.py")
    results = {}
    for name in args.variants.split(","):
        out = pathlib.Path(args.out) / name
        env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + VARIANTS[name]).strip())
        proc = subprocess.run([sys.executable, str(bench), "--model", args.model, "--batches", "1",
                               "--prefill-len", "128", "--out", str(out)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            results[name] = {"error": proc.stderr[-600:]}
        else:
            r = json.loads((out / "vanilla_speed.json").read_text())["decode"][0]
            results[name] = {"ms_per_step": r["ms_per_step"], "tok_s": r["decode_tok_s"]}
        print(name, results[name], flush=True)
    (pathlib.Path(args.out) / "xla_flag_sweep.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
