"""one_pass.png: DFlash and a jointly trained Domino (TF + curriculum), each 800 steps from the target's layers on
every answer we have (13.4 M tokens, about one pass: session 35), against session 33's DFlash (900 steps on 2.06 M
tokens, about 7 passes).
Left: held-out teacher-forced accuracy per draft: DFlash, Domino, and Domino's own backbone without its head.
Middle: training minus held-out accuracy per draft: how much each DFlash memorised.
Right: Domino's MAT over DFlash's per task on the 5-task bench, T = 0 and T = 1, and the issue's goal.
Run from the repository root: python docs/results/2026-12-05-session35-h200/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (DRAFTS, GOAL, S33, bench_mats, draft_axes, plt, run_rows, save_figure,  # noqa: E402
                           train_mean)
from domino_ratios import DRAFT_NUMBERS as drafts  # noqa: E402

dflash, domino = here / "dflash", here / "domino_tf_curriculum"

fig, (acc, memo, ratio) = plt.subplots(1, 3, figsize=(17, 5.2))
final = run_rows(domino, "eval")[-1]
acc.plot(drafts, np.array(run_rows(dflash, "eval")[-1]["acc"])[:DRAFTS], "o-", color="C0", label="DFlash")
acc.plot(drafts, np.array(final["acc"])[:DRAFTS], "o-", color="C1", label="Domino (backbone + head)")
acc.plot(drafts, np.array(final["base_acc"])[:DRAFTS], "o--", color="C1", label="Domino's backbone, head off")
acc.set_ylabel("held-out accuracy (teacher forced, 64 records)")
acc.set_title("one pass: the head doubles drafts 4+, the backbone pays")
for label, run, color in (("s33 DFlash: 2.06 M tokens, ~7 passes", S33 / "dflash", "C3"),
                          ("s35 DFlash: 13.4 M tokens, ~1 pass", dflash, "C0")):
    gap = train_mean(run)[:DRAFTS] - np.array(run_rows(run, "eval")[-1]["acc"])[:DRAFTS]
    memo.plot(drafts, gap, "o-", color=color, label=label)
memo.axhline(0, color="black", linewidth=0.5)
memo.set_ylabel("training minus held-out accuracy")
memo.set_title("memorisation")
draft_axes((acc, memo), drafts, 8)

width = 0.38
for offset, (label, bench, color) in zip((-width / 2, width / 2), (("T = 0", here / "bench5_t0", "C2"),
                                                                   ("T = 1", here / "bench5_t1", "C4"))):
    mats = bench_mats(bench)
    tasks = sorted({task for task, _ in mats})
    ratios = [mats[t, "domino_block_stop"] / mats[t, "dflash"] for t in tasks]
    mean = np.mean([mats[t, "domino_block_stop"] for t in tasks]) / np.mean([mats[t, "dflash"] for t in tasks])
    ratio.bar(np.arange(len(tasks)) + offset, ratios, width, color=color, label=f"{label} (mean {mean:.3f})")
ratio.set_xticks(np.arange(len(tasks)), tasks)
ratio.axhline(GOAL, color="grey", linestyle="--", linewidth=1, label=f"goal {GOAL}")
ratio.axhline(1.0, color="black", linewidth=0.5)
ratio.set_ylim(0.95, 1.15)
ratio.set_ylabel("MAT, domino_block_stop / dflash")
ratio.set_title("5-task bench, 20 prompts each")
ratio.legend(fontsize=8)
save_figure(fig, here / "one_pass.png", "Qwen2.5-Coder-1.5B on an H200: DFlash and Domino each read every answer "
            "about once (800 steps); neither memorises, and Domino gains 1.050x the MAT at T = 0")
