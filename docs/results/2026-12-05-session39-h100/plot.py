"""curriculum_floor.png: on session 35's one-pass data, a DFlash drafter and two Domino recipes (session 39): a head
trained alone on that DFlash drafter (frozen backbone), and joint training with λ stopped at 0.5
(--curriculum-end 0.5), against session 35's joint run, whose λ fell to 0.
Left: held-out teacher-forced accepted length at each evaluation, with each joint run's backbone (head off) dashed.
Middle: held-out accuracy per draft at the end of training.
Right: Domino over the DFlash drafter of the same session, three ways: teacher-forced accepted length, accepted length
at random anchors of the held-out walk, and the walk's MAT; and the issue's goal.
Run from the repository root: python docs/results/2026-12-05-session39-h100/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import DRAFTS, GOAL, S35, draft_axes, plt, run_rows, save_figure  # noqa: E402
from domino_ratios import DRAFT_NUMBERS as drafts  # noqa: E402

dflash = here / "dflash"
# (label, Domino run, the DFlash run it is compared with, colour)
DOMINOS = [("s35 joint, λ 1 → 0", S35 / "domino_tf_curriculum", S35 / "dflash", "C3"),
           ("s39 head alone on s39 DFlash", here / "domino_frozen_backbone", dflash, "C1"),
           ("s39 joint, λ 1 → 0.5", here / "domino_tf_curriculum_floor", dflash, "C2")]

fig, (curve, acc, ratio) = plt.subplots(1, 3, figsize=(17, 5.2))
evals = run_rows(dflash, "eval")
curve.plot([r["step"] for r in evals], [r["accept_len"] for r in evals], "o-", color="C0", label="s39 DFlash")
acc.plot(drafts, np.array(evals[-1]["acc"])[:DRAFTS], "o-", color="C0", label="s39 DFlash")
for label, run, _, color in DOMINOS:
    evals = run_rows(run, "eval")
    steps = [r["step"] for r in evals]
    curve.plot(steps, [r["accept_len"] for r in evals], "o-", color=color, label=label)
    acc.plot(drafts, np.array(evals[-1]["acc"])[:DRAFTS], "o-", color=color, label=label)
    if "joint" in label:  # a joint run's own backbone; a frozen one is the DFlash drafter itself
        curve.plot(steps, [r["base_accept_len"] for r in evals], "o--", color=color, label=f"{label}: backbone")
        acc.plot(drafts, np.array(evals[-1]["base_acc"])[:DRAFTS], "o--", color=color, label=f"{label}: backbone")
curve.set_xlabel("training step")
curve.set_ylabel("held-out accepted length (teacher forced, 64 records)")
curve.set_title("the floor keeps the joint backbone near DFlash")
curve.legend(fontsize=7)
acc.set_ylabel("held-out accuracy (teacher forced)")
acc.set_title("per draft, step 800")
draft_axes((acc,), drafts, 7)

measures = [("teacher forced", lambda run: run_rows(run, "eval")[-1]["accept_len"]),
            ("walk, anchors", lambda run: run_rows(run, "walk")[-1]["anchor_accept_len"]),
            ("walk MAT", lambda run: run_rows(run, "walk")[-1]["walk_mat"])]
width = 0.26
for i, (label, run, base, color) in enumerate(DOMINOS):
    ratios = [measure(run) / measure(base) for _, measure in measures]
    bars = ratio.bar(np.arange(len(measures)) + (i - 1) * width, ratios, width, color=color, label=label)
    ratio.bar_label(bars, fmt="%.3f", fontsize=7)
ratio.set_xticks(np.arange(len(measures)), [name for name, _ in measures])
ratio.axhline(GOAL, color="grey", linestyle="--", linewidth=1, label=f"goal {GOAL} (bench MAT)")
ratio.axhline(1.0, color="black", linewidth=0.5)
ratio.set_ylim(0.98, 1.15)
ratio.set_ylabel("Domino / DFlash of the same session")
ratio.set_title("held out, 64 records")
ratio.legend(fontsize=7, loc="upper right")
save_figure(fig, here / "curriculum_floor.png", "Qwen2.5-Coder-1.5B on an H100, one pass over 13.4 M tokens: "
            "neither a head alone nor a λ floor brings Domino past 1.06x DFlash's walk MAT")
