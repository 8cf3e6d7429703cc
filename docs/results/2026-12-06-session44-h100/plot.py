"""steps.png: session 43's soft-label head continued for 1,200 more steps on everything, with a second set of
answers sampled at T = 1 added (session 44, on an H100).
Left: held-out teacher-forced accepted length, head over its frozen backbone, during training (each session's steps
counted from the last one's end).
Middle: held-out teacher-forced accuracy per draft at the end of each session, and the backbone's (64 records).
Right: the five-task benches, Domino's MAT over DFlash's in the same run, with 95% paired-bootstrap intervals
(T = 0: sessions 42 (H100), 43 (H200) and 44 (H100); T = 1: sessions 42 and 44, both H100).
Run from the repository root: python docs/results/2026-12-06-session44-h100/plot.py"""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import head_sessions_figure  # noqa: E402

S42 = here.parent / "2026-12-05-session42-h100"
S43 = here.parent / "2026-12-06-session43-h200"
HEADS = [("s42: 1,800 steps", S42 / "domino_frozen_backbone_soft"),
         ("s43: + 800 steps", S43 / "domino_frozen_backbone_soft", 1800),
         ("s44: + 1,200 steps, + seed-2 answers", here / "domino_frozen_backbone_soft", 2600)]
BENCHES = [("s42 T = 0 (H100)", S42 / "bench5_t0"), ("s43 T = 0 (H200)", S43 / "bench5_t0"),
           ("s44 T = 0 (H100)", here / "bench5_t0"), ("s42 T = 1 (H100)", S42 / "bench5_t1"),
           ("s44 T = 1 (H100)", here / "bench5_t1")]

head_sessions_figure(HEADS, "s41 DFlash (the backbone of all three)", BENCHES, "benches, 20 prompts a task",
                     here / "steps.png", "Qwen2.5-Coder-1.5B: 1,200 more steps with a second set of T = 1 answers: "
                     "teacher-forced 1.135x -> 1.165x, walk MAT 1.090x -> 1.103x, bench 1.084x -> 1.090x "
                     "(speed 1.061x)")
