"""steps.png: session 42's soft-label head (1,800 steps alone on session 41's DFlash drafter) continued for 800 more
steps with a fresh warm-up and cosine (session 43, on an H200).
Left: held-out teacher-forced accepted length, head over its frozen backbone, during training (session 43's steps
counted from session 42's last).
Middle: held-out teacher-forced accuracy per draft at the end, both heads and the backbone (64 records).
Right: the five-task benches at T = 0, Domino's MAT over DFlash's in the same run, with 95% paired-bootstrap intervals
(session 42 on an H100, session 43 on an H200).
Run from the repository root: python docs/results/2026-12-06-session43-h200/plot.py"""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import head_sessions_figure  # noqa: E402

S42 = here.parent / "2026-12-05-session42-h100"
HEADS = [("s42: 1,800 steps", S42 / "domino_frozen_backbone_soft"),
         ("s43: + 800 steps", here / "domino_frozen_backbone_soft", 1800)]
BENCHES = [("s42 1,800 steps (H100)", S42 / "bench5_t0"), ("s43 2,600 steps (H200)", here / "bench5_t0")]

head_sessions_figure(HEADS, "s41 DFlash (the backbone of both)", BENCHES, "bench T = 0, 20 prompts a task",
                     here / "steps.png", "Qwen2.5-Coder-1.5B: 800 more steps on the same head, fresh schedule: walk "
                     "MAT 1.078x -> 1.090x, bench 1.069x -> 1.084x (speed 1.051x), still short of 1.12x / 1.08x")
