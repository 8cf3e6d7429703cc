"""Plot this folder's Token Recycling runs on HumanEval: speedup over vanilla per tree (each run measures its own
vanilla), and MAT against the loop's ms per step, where a larger tree buys MAT with a longer step."""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jspec.bench.report import summarize  # noqa: E402 (run from the repository root)

here = pathlib.Path(__file__).parent

# run folder -> (label, bench label of the Token Recycling row); runs a-c had the bf16 LM-head output
RUNS = {
    "bench_d": ("ShareGPT 60 (shipped before)", "token_recycling_tuned"),
    "bench_a": ("MBPP deep 60", "token_recycling_tuned"),
    "bench_c": ("MBPP deep 64 (bf16 head)", "token_recycling_tuned"),
    "bench_e": ("MBPP deep 64", "token_recycling_tuned"),
    "bench_f": ("ShareGPT deep 64, run 1", "token_recycling_tuned"),
    "bench_g": ("ShareGPT deep 64, run 2", "token_recycling_tuned"),
    "bench_h": ("ShareGPT deep 64, 40 prompts", "token_recycling_tuned"),
    "bench_b": ("MBPP deep 81", "token_recycling_tuned"),
}
FULL = ("bench_a", "2.2.2 full 81", "token_recycling_full")


def humaneval(folder: str, method: str) -> tuple[float, float, float]:
    """(MAT, loop ms / step, speedup) of `method` on HumanEval, as the run's summary.md computes them."""
    records = [json.loads(line) for line in (here / folder / "results.jsonl").read_text().splitlines()]
    row = next(r for r in summarize(records) if r["dataset"] == "humaneval" and r["method"] == method)
    return row["mat"], row["loop_ms_per_step"], row["speedup"]


points = [(label, *humaneval(folder, method)) for folder, (label, method) in RUNS.items()]
points.append((FULL[1], *humaneval(FULL[0], FULL[2])))

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
labels = [p[0] for p in points]
left.barh(labels, [p[3] for p in points], color=["tab:green" if p[3] >= 2.0 else "tab:blue" for p in points])
left.axvline(2.0, color="k", ls="--", lw=1, label="goal 2.0x")
left.set_xlim(1.7, 2.1)
left.set_xlabel("speedup over vanilla (tok/s ratio, same run)")
left.set_title("Token Recycling on HumanEval (20 prompts unless noted)")
left.invert_yaxis()
left.legend(loc="lower right")
for label, mat, loop_ms, speed in points:
    right.scatter(loop_ms, mat)
    right.annotate(label, (loop_ms, mat), fontsize=7, xytext=(4, 2), textcoords="offset points")
right.set_xlabel("decode loop ms / step")
right.set_ylabel("MAT (tokens per target step)")
right.set_title("MAT against step time")
fig.tight_layout()
fig.savefig(here / "tr_trees.png", dpi=120)
for p in points:
    print(f"{p[0]:32s} MAT {p[1]:.2f}  loop {p[2]:.2f} ms  {p[3]:.2f}x")
