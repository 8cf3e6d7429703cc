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

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import fork_figure  # noqa: E402

fork_figure(here, "DFlash continued (dflash_fair)", [("s52 fork, 400 steps each", here / "bench5_t0")],
            here / "steps_fair.png", "Qwen2.5-Coder-1.5B, H100: forked from one 600-step DFlash drafter and "
            "trained 400 steps each, Domino reaches 1.037x the continued DFlash's MAT")
