"""ratio_vs_base.png: per task, MAT(domino_block) / MAT(dflash) against DFlash's MAT for the T = 0 benches of
sessions 19, 22 and 25, with the curves (1 + g(M - 1)) / M of a fixed gain g on the drafted tokens. Run from the repo
root: python docs/results/2026-12-03-session25-h200/plot.py"""

import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jspec.bench.report import summarize  # noqa: E402 (run from the repository root)

here = pathlib.Path(__file__).parent
runs = {"s19: 600 steps, ShareGPT": here.parent / "2026-12-02-session19-h200" / "bench5_t0",
        "s22: 400 steps, + task answers": here.parent / "2026-12-03-session22-h200" / "bench5_t0",
        "s25: 600 steps, + task answers": here / "bench5_t0"}


def task_mats(folder: pathlib.Path) -> dict[str, dict[str, float]]:
    """dataset -> method -> MAT pooled over the dataset's prompts (the bench summary's rows)."""
    mats = collections.defaultdict(dict)
    for row in summarize([json.loads(line) for line in open(folder / "results.jsonl")]):
        mats[row["dataset"]][row["method"]] = row["mat"]
    return mats


fig, ax = plt.subplots(figsize=(6.5, 4.5))
for label, folder in runs.items():
    mats = task_mats(folder)
    base = np.array([m["dflash"] for m in mats.values()])
    domino = np.array([m["domino_block"] for m in mats.values()])
    ax.scatter(base, domino / base, label=label)
    if label.startswith("s25"):
        for name, d, o in zip(mats, base, domino):
            ax.annotate(name, (d, o / d), fontsize=7, xytext=(3, 3), textcoords="offset points")
m = np.linspace(1.15, 2.6, 100)
for g in (1.2, 1.25, 1.3):
    ax.plot(m, (1 + g * (m - 1)) / m, color="gray", linewidth=0.8, linestyle=":")
    ax.text(2.62, (1 + g * 1.6) / 2.6, f"g = {g}", fontsize=7, color="gray", va="center")
ax.axhline(1.12, color="gray", linestyle="--", linewidth=1)
ax.text(1.16, 1.123, "goal 1.12", fontsize=7, color="gray")
ax.set_xlim(1.1, 2.8)
ax.set_xlabel("DFlash MAT on the task")
ax.set_ylabel("MAT(domino_block) / MAT(dflash)")
ax.set_title("Domino / DFlash MAT ratio per task, T = 0 (Qwen2.5-Coder-1.5B, H200)")
ax.legend(fontsize=7, loc="lower right")
fig.tight_layout()
fig.savefig(here / "ratio_vs_base.png", dpi=120)
print(f"wrote {here / 'ratio_vs_base.png'}")
