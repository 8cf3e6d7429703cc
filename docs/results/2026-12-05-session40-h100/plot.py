"""stronger_dflash.png: a DFlash drafter made stronger with T = 1 answers and 1,200 steps (session 40), and a head
trained alone on it, against session 39's DFlash drafter (800 steps, greedy answers only) and its head alone.
Left: held-out teacher-forced accuracy per draft at the end of training (64 records, the same in both sessions).
Middle: every head trained alone on a frozen DFlash backbone (sessions 27-40): the backbone's held-out walk MAT
against the head's walk MAT over it. Squares: the one-pass data of sessions 33-40, whose held-out records are the same.
Right: the T = 0 five-task benches: DFlash's mean MAT against Domino's ratio to it.
Run from the repository root: python docs/results/2026-12-05-session40-h100/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (DRAFTS, GOAL, S25, S27, S28, S30, S31, S32, S33, S35, S39, bench_mats,  # noqa: E402
                           draft_axes, mean_mat, plt, ratio_axes, run_rows, save_figure)
from domino_ratios import DRAFT_NUMBERS as drafts  # noqa: E402


fig, (acc, walks, benches) = plt.subplots(1, 3, figsize=(17, 5.2))
for label, run, color, style in [("s39 DFlash (800 steps, greedy answers)", S39 / "dflash", "C0", "--"),
                                 ("s39 head alone on it", S39 / "domino_frozen_backbone", "C0", "-"),
                                 ("s40 DFlash (1,200 steps, + T = 1 answers)", here / "dflash", "C3", "--"),
                                 ("s40 head alone on it", here / "domino_frozen_backbone", "C3", "-")]:
    acc.plot(drafts, np.array(run_rows(run, "eval")[-1]["acc"])[:DRAFTS], style, marker="o", color=color,
             label=label)
acc.set_ylabel("held-out accuracy (teacher forced)")
acc.set_title("the head's deep drafts stay put while DFlash's rise")
draft_axes((acc,), drafts, 8)

# (label, head trained alone; its run logs the frozen backbone's walk MAT as base_walk_mat)
HEADS = [("s27, 600 steps", S27 / "domino_frozen_backbone"), ("s28, 400 steps", S28 / "domino_head_alone"),
         ("s30, 1,800 steps", S30 / "domino_frozen_backbone"), ("s32, 1,200 steps", S32 / "domino_frozen_backbone"),
         ("s33, 600 steps", S33 / "domino_frozen_backbone"),
         ("s33 fresh, 600 steps", S33 / "domino_frozen_backbone_fresh"),
         ("s39, 800 steps", S39 / "domino_frozen_backbone"), ("s40, 600 steps", here / "domino_frozen_backbone")]
for i, (label, run) in enumerate(HEADS):
    walk = run_rows(run, "walk")[-1]
    base, ratio = walk["base_walk_mat"], walk["walk_mat"] / walk["base_walk_mat"]
    one_pass = run.parent.name >= "2026-12-04-session33"
    walks.scatter(base, ratio, color=f"C{i}", marker="s" if one_pass else "o", label=f"{label}: {ratio:.3f}")
ratio_axes(walks, "held-out walk MAT")
walks.set_title("heads alone: gain against the backbone's strength")
walks.legend(fontsize=7)

# (label, T = 0 bench of 5 tasks, the Domino method it ran)
BENCHES = [("s25 joint", S25 / "bench5_t0", "domino_block"), ("s28 joint", S28 / "bench5_t0", "domino_block"),
           ("s30 head alone", S30 / "bench5_t0", "domino_block_stop"),
           ("s31 head alone", S31 / "bench5_t0", "domino_block_stop"),
           ("s32 head alone", S32 / "bench5_t0", "domino_block_stop"),
           ("s35 joint", S35 / "bench5_t0", "domino_block_stop"),
           ("s40 head alone", here / "bench5_t0", "domino_block_stop")]
for i, (label, bench, method) in enumerate(BENCHES):
    mats = bench_mats(bench)
    base = mean_mat(mats, "dflash")
    ratio = mean_mat(mats, method) / base
    benches.scatter(base, ratio, color=f"C{i}", marker="s" if "alone" in label else "o", label=f"{label}: {ratio:.3f}")
ratio_axes(benches, "bench mean MAT (T = 0)")
benches.set_title(f"benches: none reaches the goal ({GOAL})")
benches.legend(fontsize=7)
save_figure(fig, here / "stronger_dflash.png", "Qwen2.5-Coder-1.5B: a stronger DFlash drafter (walk MAT 2.037 -> "
            "2.227) leaves a head trained alone with less to add (walk 1.057x -> 1.026x, bench 1.020x)")
