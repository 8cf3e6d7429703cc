"""steps.png: two soft-label heads (`--labels target`) trained alone on session 41's DFlash drafter, for 600 steps
(session 41) and for 1,800 steps (session 42), each with its cosine schedule over its own length.
Left: held-out teacher-forced accepted length, head over its frozen backbone, during training.
Middle: held-out teacher-forced accuracy per draft at the end, both heads and the backbone (64 records).
Right: the five-task benches at T = 0 (both heads) and T = 1 (the 1,800-step head), Domino's MAT over DFlash's in
the same run, with 95% paired-bootstrap intervals.
Run from the repository root: python docs/results/2026-12-05-session42-h100/plot.py"""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import head_sessions_figure  # noqa: E402

S41 = here.parent / "2026-12-05-session41-h100"
HEADS = [("s41: 600 steps", S41 / "domino_frozen_backbone_soft"),
         ("s42: 1,800 steps", here / "domino_frozen_backbone_soft")]
BENCHES = [("s41 600 steps, T = 0", S41 / "bench5_t0"), ("s42 1,800 steps, T = 0", here / "bench5_t0"),
           ("s42 1,800 steps, T = 1", here / "bench5_t1")]

head_sessions_figure(HEADS, "s41 DFlash (the backbone of both)", BENCHES, "bench, 20 prompts a task",
                     here / "steps.png", "Qwen2.5-Coder-1.5B on an H100: a soft-label head trained alone for 1,800 "
                     "steps instead of 600 gains twice as much (bench 1.034x -> 1.069x), still short of 1.12x")
