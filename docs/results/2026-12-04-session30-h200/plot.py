"""head_alone.png: the Domino head trained alone on a frozen DFlash backbone, sessions 27, 28 and 30.
Left: teacher-forced accepted length on the 64 held-out records, head over base (the frozen DFlash logits), at each
evaluation of the run, from its metrics.jsonl. Middle: held-out walk MAT, Domino over DFlash, against DFlash's walk MAT
(every pair compared so far; squares: heads trained alone). Right: T = 0 bench, mean MAT over the five tasks, Domino
(`domino_block`) over DFlash, against DFlash's. The dashed line is issue 5's goal (1.12).
Run from the repository root: python docs/results/2026-12-04-session30-h200/plot.py"""

import pathlib
import sys


here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (S25, S27, S28, S29, WALKS_TO_S28, finish_ratio_figure, plot_bench_means,  # noqa: E402
                           plot_head_curves, plot_walks, plt)

head_runs = [("s27: 600 steps on s26 DFlash", S27 / "domino_frozen_backbone"),
             ("s28: 400 steps on s28 DFlash", S28 / "domino_head_alone"),
             ("s30: 1,800 steps on s29 DFlash", here / "domino_frozen_backbone")]
walks = [*WALKS_TO_S28, ("s29 joint, continued with follow-up turns", S29 / "dflash", S29 / "domino_tf_curriculum"),
         ("s30 head alone on s29 DFlash", S29 / "dflash", here / "domino_frozen_backbone")]
benches = [("s25, joint", S25 / "bench5_t0"), ("s28, joint", S28 / "bench5_t0"),
           ("s30, head alone", here / "bench5_t0")]

fig, (curve, left, right) = plt.subplots(1, 3, figsize=(16, 5.5))
plot_head_curves(curve, head_runs, "head alone: held-out gain during training", legend_size=7)
plot_walks(left, walks)
plot_bench_means(right, benches)
finish_ratio_figure(fig, left, right, "bench mean MAT", "T = 0 bench, 5 tasks, 20 prompts each",
                    "Qwen2.5-Coder-1.5B on an H200: the Domino head trained alone, longer, on a fixed DFlash drafter",
                    here / "head_alone.png", loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1)
