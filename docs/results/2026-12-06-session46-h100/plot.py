"""steps.png: the data-fair pair of session 46 (on an H100): a DFlash drafter and a soft-label head alone on it, both
trained from the start on the same answers (greedy and the three T = 1 sets), beside the head of sessions 42 to 45,
which read five times the steps and two T = 1 sets its DFlash drafter (session 41's) never did.
Left: held-out teacher-forced accepted length, head over its frozen backbone, during training (sessions 42 to 45's
steps counted from the first one's start).
Middle: held-out teacher-forced accuracy per draft at the end of each run, and each backbone's (64 records).
Right: the five-task benches, Domino's MAT over DFlash's in the same run, with 95% paired-bootstrap intervals
(all on H100s; sessions 45 and 46 at T = 0 and T = 1).
Run from the repository root: python docs/results/2026-12-06-session46-h100/plot.py"""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import head_sessions_figure  # noqa: E402

S42 = here.parent / "2026-12-05-session42-h100"
S45 = here.parent / "2026-12-06-session45-h100"
HEADS = [("s42: 1,800 steps on s41 DFlash", S42 / "domino_frozen_backbone_soft"),
         ("s45: its 5,000th step (sessions 42-45, + seeds 2, 3)", S45 / "domino_frozen_backbone_soft", 3800),
         ("s46: 1,300 steps on s46 DFlash (same answers)", here / "domino_frozen_backbone_soft")]
BENCHES = [("s45 T = 0, over s41 DFlash", S45 / "bench5_t0"), ("s46 T = 0, data-fair", here / "bench5_t0"),
           ("s45 T = 1, over s41 DFlash", S45 / "bench5_t1"), ("s46 T = 1, data-fair", here / "bench5_t1")]

head_sessions_figure(HEADS, "s41 DFlash (backbone of s42-45)", BENCHES, "benches, 20 prompts a task",
                     here / "steps.png", "Qwen2.5-Coder-1.5B: DFlash and a head trained on the same answers "
                     "(1,200 + 1,300 steps): bench MAT 1.058x, speed 1.032x at T = 0 (s45's 5,000-step head: "
                     "1.098x, 1.068x)",
                     other_backbones=[("s46 DFlash (all answers, 1,200 steps)", here / "domino_frozen_backbone_soft")])
