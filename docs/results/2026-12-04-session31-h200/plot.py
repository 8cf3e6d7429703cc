"""head_variants.png: the Domino head trained alone on session 29's DFlash drafter at rank 256 (session 30) and
rank 512 (session 31), everything else the same.
Left: teacher-forced accepted length on the 64 held-out records, head over base, at each evaluation (metrics.jsonl);
also session 31's rank-256 run with `--position-weights reach`, stopped after 670 steps.
Middle and right: `domino_block_stop` over `dflash` per task and on the mean, MAT ratio and speed ratio, with 95%
paired-bootstrap intervals (jspec.bench.ratios), for the T = 0 benches of both sessions and session 31's T = 1 bench.
The dashed lines are issue 5's goals (1.12 and 1.08).
ratio_vs_task_mat.png: see the comment above it.
Run from the repository root: python docs/results/2026-12-04-session31-h200/plot.py"""

import json
import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import GOAL, S30, bench_mats, plot_head_curves, plt, save_figure  # noqa: E402

from jspec.bench.ratios import paired_ratios  # noqa: E402

SPEED_GOAL = 1.08  # issue 5: speedup(domino) >= 1.08 x speedup(dflash)
TASKS = ["humaneval", "gsm8k", "mtbench", "alpaca", "xsum", "mean"]
runs = [("s30: rank 256", S30 / "domino_frozen_backbone"), ("s31: rank 512", here / "domino_frozen_backbone"),
        ("s31: rank 256, reach weights (stopped at 670)", here / "domino_reach_weights")]
benches = [("s30 rank 256, T = 0", S30 / "bench5_t0"), ("s31 rank 512, T = 0", here / "bench5_t0"),
           ("s31 rank 512, T = 1", here / "bench5_t1")]

fig, (curve, mat, speed) = plt.subplots(1, 3, figsize=(17, 5.2))
plot_head_curves(curve, runs, "head alone on s29 DFlash: held-out gain during training", legend_size=8)

width = 0.8 / len(benches)
for i, (label, bench) in enumerate(benches):
    rows = {r["dataset"]: r for r in paired_ratios([json.loads(line) for line in open(bench / "results.jsonl")])
            if r["method"] == "domino_block_stop"}
    xs = [t + (i - (len(benches) - 1) / 2) * width for t in range(len(TASKS))]
    for ax, key in ((mat, "mat"), (speed, "speed")):
        points = [rows[t][f"{key}_ratio"] for t in TASKS]
        errors = [[p - rows[t][f"{key}_ci"][0] for t, p in zip(TASKS, points)],
                  [rows[t][f"{key}_ci"][1] - p for t, p in zip(TASKS, points)]]
        ax.errorbar(xs, points, yerr=errors, fmt="o", color=f"C{i + 3}", capsize=3, label=label)
for ax, what, goal in ((mat, "MAT", GOAL), (speed, "speedup", SPEED_GOAL)):
    ax.axhline(goal, color="grey", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xticks(range(len(TASKS)), TASKS)
    ax.set_ylabel(f"domino_block_stop / dflash, {what}")
    ax.set_title(f"bench, 20 prompts a task: {what} ratio, 95% interval")
    ax.legend(fontsize=8)
save_figure(fig, here / "head_variants.png", "Qwen2.5-Coder-1.5B on an H200: twice the head's rank changes "
            "nothing, and reach-weighted drafts train slower")

# ratio_vs_task_mat.png: per task, Domino's MAT ratio against DFlash's MAT, both T = 0 benches (whole head), with a
# least-squares line; for scale, the pair the Domino paper (arXiv 2605.29707, Fig. 1, Qwen3-8B, as quoted by
# secondary pages) publishes: DFlash τ 4.03, Domino 4.70. Not measured here.
PAPER_DFLASH, PAPER_DOMINO = 4.03, 4.70
fig, ax = plt.subplots(figsize=(7, 4.8))
xs, ys = [], []
for i, (label, bench) in enumerate(benches[:2]):
    mats = bench_mats(bench)
    for task in TASKS[:-1]:
        x, y = mats[task, "dflash"], mats[task, "domino_block"] / mats[task, "dflash"]
        xs.append(x)
        ys.append(y)
        ax.scatter(x, y, color=f"C{i + 3}", label=label if task == TASKS[0] else None)
        if i == 0:
            ax.annotate(task, (x, y), textcoords="offset points", xytext=(5, 3), fontsize=7)
slope, intercept = np.polyfit(xs, ys, 1)
r = np.corrcoef(xs, ys)[0, 1]
line = np.linspace(1.6, 4.2, 2)
ax.plot(line, intercept + slope * line, color="grey", linewidth=1,
        label=f"fit: {intercept:.3f} + {slope:.3f} x DFlash MAT (r = {r:.2f})")
ax.scatter(PAPER_DFLASH, PAPER_DOMINO / PAPER_DFLASH, marker="*", s=150, facecolors="none", edgecolors="black",
           label="paper, Qwen3-8B (published, not measured here)")
ax.axhline(GOAL, color="grey", linestyle="--", linewidth=1)
ax.axhline(1.0, color="black", linewidth=0.5)
ax.set_xlabel("DFlash MAT on the task")
ax.set_ylabel("domino_block / dflash, MAT")
ax.set_title("T = 0 bench per task: the head gains more where DFlash's blocks go deeper", fontsize=10)
ax.legend(fontsize=7, loc="upper left")
save_figure(fig, here / "ratio_vs_task_mat.png")
