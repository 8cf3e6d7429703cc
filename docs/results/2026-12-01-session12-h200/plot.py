"""verify(60) / decode per tree-attention configuration, random weights, H200 (run from the repository root):
    python docs/results/2026-12-01-session12-h200/plot.py  ->  verify_tuning.png"""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).parent
OLD = "packed, block_r 128, 8 warps, 2 stages"  # the heuristics before this session (runs 1 and 2)
NEW = "packed, block_r 64, 4 warps, 3 stages, 11 splits"  # the heuristics of 093b920 (run 3)


def rows():
    """(run, context, label, verify / decode) for every timed configuration."""
    runs = json.loads((HERE / "verify_tuning_runs1_2.json").read_text())["runs"]
    runs = [(f"run {i + 1}", r["ms_per_step"], OLD, "old") for i, r in enumerate(runs)]
    runs.append(("run 3", json.loads((HERE / "verify_tuning_run3.json").read_text())["ms_per_step"], NEW, "new"))
    runs.append(("run 4", json.loads((HERE / "verify_tuning_heads_run4.json").read_text())["ms_per_step"],
                 "heads, 8 warps, 3 stages, 11 splits", "heads"))
    for run, timings, default, base in runs:  # a tuning overrides its run's heuristics (`base`)
        decode = {r["context"]: r["decode"] for r in timings if "decode" in r}
        for r in timings:
            label = f"{base} + {r['tree_tuning']}" if "tree_tuning" in r else default
            yield run, r["context"], f"{label} ({run})", r["verify"] / decode[r["context"]]


def main():
    data = list(rows())
    fig, axes = plt.subplots(1, 2, figsize=(13, 7), sharey=False)
    for ax, context in zip(axes, (2048, 8192)):
        pts = sorted((ratio, label) for _, ctx, label, ratio in data if ctx == context)
        ax.barh([label for _, label in pts], [ratio for ratio, _ in pts],
                color=["tab:green" if ratio <= 1.3 else "tab:gray" for ratio, _ in pts])
        ax.axvline(1.3, color="tab:red", linestyle="--", label="goal 1.3")
        ax.set_xlim(1.2, 1.5)
        ax.set_title(f"context {context}")
        ax.set_xlabel("verify(60) / decode, same run")
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(loc="lower right")
    fig.suptitle("Qwen2.5-Coder-1.5B shapes, random weights, H200: tree-attention configurations inside the step")
    fig.tight_layout()
    fig.savefig(HERE / "verify_tuning.png", dpi=110)


if __name__ == "__main__":
    main()
