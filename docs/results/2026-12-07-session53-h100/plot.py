"""steps_fair_soft.png: session 53's steps-fair fork on soft labels (H100). DFlash trained 600 steps from the
target's layers, then forked: a joint Domino (that backbone, a fresh head, the base loss held at half the weight)
and DFlash continued (run dflash_fair), 400 steps each on the same answers. Every run trains on the target's
distributions (LABELS=target), so the head is all that differs between the branches; session 52's fork, where
both DFlash runs had the data's tokens, is drawn alongside.
Left: held-out teacher-forced accepted length against the chain's steps (the fork at 600): DFlash, Domino, and
Domino's own backbone without its head (dashed); session 52's continued DFlash (hard labels) in grey.
Middle: held-out teacher-forced accuracy per draft at the end of each branch (64 records).
Right: the five-task T = 0 bench, Domino's MAT over the continued DFlash per task, with 95% paired-bootstrap
intervals, for both sessions' forks.
Run from the repository root: python docs/results/2026-12-07-session53-h100/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import fork_branches, plot_fork, plot_task_ratios, plt, run_rows, save_figure  # noqa: E402

FORK = 600  # DFlash's steps before the fork

SESSION52 = here.parent / "2026-12-07-session52-h100"
fig, (curve, acc, bench) = plt.subplots(1, 3, figsize=(17, 5.2))
plot_fork(curve, acc, here / "dflash", fork_branches(here, "DFlash continued, soft labels"), FORK)
hard = run_rows(SESSION52 / "dflash_fair", "eval")
curve.plot([FORK + r["step"] for r in hard], [r["accept_len"] for r in hard], "x:", color="grey",
           label=f"session 52's DFlash continued, hard labels: {hard[-1]['accept_len']:.3f}")
curve.set_title("600 steps of DFlash, then 400 more for each branch")
curve.legend(fontsize=8)

plot_task_ratios(bench, [("s52: DFlash on hard labels", SESSION52 / "bench5_t0"),
                         ("s53: every run on soft labels", here / "bench5_t0")], "T = 0 bench, 20 prompts a task")
save_figure(fig, here / "steps_fair_soft.png", "Qwen2.5-Coder-1.5B, H100: with soft labels for every run, the head "
            "alone gives Domino 1.015x the continued DFlash's MAT")
