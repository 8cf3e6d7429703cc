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

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import fork_figure  # noqa: E402

SESSION52 = here.parent / "2026-12-07-session52-h100"
fork_figure(here, "DFlash continued, soft labels",
            [("s52: DFlash on hard labels", SESSION52 / "bench5_t0"),
             ("s53: every run on soft labels", here / "bench5_t0")],
            here / "steps_fair_soft.png", "Qwen2.5-Coder-1.5B, H100: with soft labels for every run, the head alone "
            "gives Domino 1.015x the continued DFlash's MAT",
            reference=("session 52's DFlash continued, hard labels", SESSION52 / "dflash_fair"))
