"""head_lr.png: session 56's steps-fair fork with the head's learning rate tripled (H100). As session 53's fork:
DFlash trained 600 steps from the target's layers, then forked into a joint Domino (that backbone, a fresh head,
the base loss held at half the weight) and DFlash continued (run dflash_fair), 400 steps each, every run on soft
labels. The one change: the head's AdamW updates are 3x the backbone's (--head-lr-scale 3).
Left: held-out teacher-forced accepted length against the chain's steps (the fork at 600): DFlash, Domino and
Domino's own backbone without its head (dashed); session 53's Domino (head at 1x) in grey.
Middle: held-out teacher-forced accuracy per draft at the end of each branch (64 records).
Right: the five-task T = 0 bench, Domino's MAT over the continued DFlash per task, with 95% paired-bootstrap
intervals, for session 53's fork and this one.
Run from the repository root: python docs/results/2026-12-07-session56-h100/plot.py"""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import fork_figure  # noqa: E402

SESSION53 = here.parent / "2026-12-07-session53-h100"
fork_figure(here, "DFlash continued",
            [("s53: head at the backbone's rate", SESSION53 / "bench5_t0"), ("s56: head at 3x", here / "bench5_t0")],
            here / "head_lr.png", "Qwen2.5-Coder-1.5B, H100: a head at 3x the backbone's learning rate gives Domino "
            "1.022x the continued DFlash's MAT",
            reference=("session 53's Domino, head at 1x", SESSION53 / "domino_tf_curriculum_floor_soft"))
