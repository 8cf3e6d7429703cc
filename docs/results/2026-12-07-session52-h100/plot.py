"""steps_fair.png: session 52's one-session steps-fair fork (H100). DFlash trained 600 steps from the target's
layers, then forked: a joint Domino (that backbone, a fresh head, the base loss held at half the weight) and DFlash
continued (run dflash_fair), 400 steps each on the same answers.
Left: held-out teacher-forced accepted length against the chain's steps (the fork at 600): DFlash, Domino, and
Domino's own backbone without its head (dashed).
Middle: held-out teacher-forced accuracy per draft at the end of each branch (64 records).
Right: the five-task T = 0 bench, Domino's MAT over the continued DFlash per task, with 95% paired-bootstrap
intervals.
Run from the repository root: python docs/results/2026-12-07-session52-h100/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import DRAFT_NUMBERS, DRAFTS, draft_axes, plot_task_ratios, plt, run_rows, save_figure  # noqa: E402

FORK = 600  # DFlash's steps before the fork
STEM = run_rows(here / "dflash", "eval")
DOMINO = here / "domino_tf_curriculum_floor_soft"
BRANCHES = [("DFlash continued (dflash_fair)", here / "dflash_fair", "accept_len", "o-"),
            ("Domino (joint, λ = 0.5)", DOMINO, "accept_len", "o-"),
            ("Domino's backbone alone", DOMINO, "base_accept_len", "s--")]

fig, (curve, acc, bench) = plt.subplots(1, 3, figsize=(17, 5.2))
curve.plot([r["step"] for r in STEM], [r["accept_len"] for r in STEM], "o-", color="grey", label="DFlash, to the fork")
for i, (label, run, key, style) in enumerate(BRANCHES):
    rows = run_rows(run, "eval")
    curve.plot([FORK] + [FORK + r["step"] for r in rows], [STEM[-1]["accept_len"]] + [r[key] for r in rows], style,
               color=f"C{i}", label=f"{label}: {rows[-1][key]:.3f}")
curve.axvline(FORK, color="black", linewidth=0.5)
curve.set_xlabel("training step of the chain")
curve.set_ylabel("held-out teacher-forced accepted length")
curve.set_title("600 steps of DFlash, then 400 more for each branch")
curve.legend(fontsize=8)

for i, (label, run, key, style) in enumerate(BRANCHES):
    final = run_rows(run, "eval")[-1][key.replace("accept_len", "acc")]
    acc.plot(DRAFT_NUMBERS, np.array(final)[:DRAFTS], style, color=f"C{i}", label=label)
acc.set_ylabel("held-out accuracy (teacher forced)")
acc.set_title("per draft, end of each branch")
draft_axes((acc,), DRAFT_NUMBERS, legend_size=8)

plot_task_ratios(bench, [("s52 fork, 400 steps each", here / "bench5_t0")], "T = 0 bench, 20 prompts a task")
save_figure(fig, here / "steps_fair.png", "Qwen2.5-Coder-1.5B, H100: forked from one 600-step DFlash drafter and "
            "trained 400 steps each, Domino reaches 1.037x the continued DFlash's MAT")
