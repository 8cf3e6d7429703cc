"""fresh_head.png: two Domino heads trained alone (600 steps each, same recipe) on one memorised DFlash backbone
(session 33), one on the backbone's own training answers, one on answers to conversations it never saw.
Left: held-out teacher-forced accepted length, head over base, at each evaluation (sessions 30 and 32 for scale).
Middle: what each head adds to its backbone's accuracy per draft, held out (64 records) and on its training batches.
Right: the backbone's accuracy per draft on each head's training batches and held out: how much it memorised.
Run from the repository root: python docs/results/2026-12-04-session33-h200/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (DRAFTS, S30, S32, draft_axes, plot_head_curves, plt, run_rows, save_figure,  # noqa: E402
                           train_mean)
from domino_ratios import DRAFT_NUMBERS as drafts  # noqa: E402

heads = [("its training answers (8,192, read 4.8x)", here / "domino_frozen_backbone", "C2"),
         ("fresh answers (15,306, read 1.5x)", here / "domino_frozen_backbone_fresh", "C3")]



fig, (curves, gain, memo) = plt.subplots(1, 3, figsize=(17, 5.2))
plot_head_curves(curves, [("s30: on s29 DFlash, its data (1,800 steps)", S30 / "domino_frozen_backbone"),
                          ("s32: on continued DFlash, its data (1,200 steps)", S32 / "domino_frozen_backbone"),
                          ("s33: on s33 DFlash, " + heads[0][0], heads[0][1]),
                          ("s33: on s33 DFlash, " + heads[1][0], heads[1][1])],
                 "held out: head over base (s33: 1.056x fresh, 1.032x own)", 7)
for label, run, color in heads:
    final = run_rows(run, "eval")[-1]
    held_out = (np.array(final["acc"]) - np.array(final["base_acc"]))[:DRAFTS]
    gain.plot(drafts, held_out, "-", marker="o", color=color, label=f"held out, head on {label}")
    gain.plot(drafts, (train_mean(run, "acc") - train_mean(run, "base_acc"))[:DRAFTS], "--", marker="o", color=color,
              label=f"its training batches, head on {label}")
    memo.plot(drafts, train_mean(run, "base_acc")[:DRAFTS], "--", marker="o", color=color,
              label=f"batches of the head on {label}")
memo.plot(drafts, np.array(run_rows(heads[0][1], "eval")[-1]["base_acc"])[:DRAFTS], "-", marker="o", color="black",
          label="held out (64 records)")
gain.axhline(0, color="black", linewidth=0.5)
gain.set_ylabel("head accuracy minus backbone accuracy (teacher forced)")
gain.set_title("what the head adds, per draft")
memo.set_ylabel("backbone accuracy (teacher forced)")
memo.set_title("the backbone: memorised its training answers")
draft_axes((gain, memo), drafts, 7)
save_figure(fig, here / "fresh_head.png", "Qwen2.5-Coder-1.5B on an H200: one DFlash backbone (900 steps on 8,192 "
            "answers), two heads alone on it; the one on answers the backbone never saw gains twice as much")
