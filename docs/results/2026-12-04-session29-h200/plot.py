"""ratio_vs_strength.png: Domino's MAT over DFlash's against the DFlash drafter's own MAT, sessions 25 to 29.
Left: held-out walk MAT (the decode loop replayed over the same 64 held-out answers), from each run's metrics.jsonl.
Right: MAT of the T = 0 bench on HumanEval and GSM8K (20 prompts each, 256 new tokens), the two tasks that this
session's bench finished, from each bench's results.jsonl. Sessions 25, 26 and 28 ran the head on drafts 1-6 only
(HEAD_DRAFTS=6); session 29 ran the whole head. The dashed line is issue 5's goal (1.12).
Run from the repository root: python docs/results/2026-12-04-session29-h200/plot.py"""

import pathlib
import sys


here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (S25, S26, S28, WALKS_TO_S28, bench_mats, finish_ratio_figure, plot_walks,  # noqa: E402
                           plt)

walks = [(label.replace(" (DFlash 1,200 steps)", ""), dflash, domino) for label, dflash, domino in WALKS_TO_S28]
walks.append(("s29 joint, continued with follow-up turns", here / "dflash", here / "domino_tf_curriculum"))
benches = [("s25", S25 / "bench5_t0"), ("s26", S26 / "bench5_t0_partial"), ("s28", S28 / "bench5_t0"),
           ("s29, whole head", here / "bench5_t0_partial")]
tasks = ("humaneval", "gsm8k")

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 6))
plot_walks(left, walks)
for i, (label, bench) in enumerate(benches):
    mats = bench_mats(bench)
    for task, marker in zip(tasks, "o^"):
        base = mats[task, "dflash"]
        ratio = mats[task, "domino_block"] / base
        right.scatter(base, ratio, color=f"C{i}", marker=marker, label=f"{label} {task}: {ratio:.3f}")
finish_ratio_figure(fig, left, right, "bench MAT", "T = 0 bench, HumanEval (o) and GSM8K (^), 20 prompts each",
                    "Qwen2.5-Coder-1.5B on an H200: Domino's gain over DFlash, sessions 25-29",
                    here / "ratio_vs_strength.png", loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
