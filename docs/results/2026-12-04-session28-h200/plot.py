"""ratio_vs_strength.png: Domino's MAT over DFlash's against how strong the DFlash drafter is, sessions 25 to 28.
Left: held-out walk MAT (the decode loop replayed over 64 held-out answers), read from each run's metrics.jsonl.
Right: mean MAT of the T = 0 bench (20 prompts a task, 256 new tokens), read from each bench's results.jsonl; session
26's bench lost its fifth task, so its point is the mean of four. The dashed line is issue 5's goal (1.12).
Run from the repository root: python docs/results/2026-12-04-session28-h200/plot.py"""

import pathlib
import sys


here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (S25, S26, WALKS_TO_S28, finish_ratio_figure, plot_bench_means, plot_walks,  # noqa: E402
                           plt)

benches = [("s25, 5 tasks", S25 / "bench5_t0"), ("s26, 4 tasks", S26 / "bench5_t0_partial"),
           ("s28, 5 tasks", here / "bench5_t0")]


fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
plot_walks(left, WALKS_TO_S28)
plot_bench_means(right, benches)
finish_ratio_figure(fig, left, right, "bench mean MAT", "T = 0 bench, 20 prompts a task",
                    "Qwen2.5-Coder-1.5B on an H200: the stronger the DFlash drafter, the less the Domino head adds",
                    here / "ratio_vs_strength.png", loc="upper right")
