"""label_noise.png: three heads trained alone for 600 steps on DFlash drafters of session 40's recipe (1,200 steps,
greedy + T = 1 answers): session 40's on all the answers with hard labels, session 41's on the greedy answers only
(greedy) and on all the answers with the target's distributions as labels (soft), both over one DFlash drafter.
Left: held-out teacher-forced accepted length, head over its frozen backbone, during training.
Middle: held-out teacher-forced accuracy per draft at the end, each head and its backbone (64 records, the same in
both sessions).
Right: the T = 0 five-task benches, Domino's MAT over DFlash's in the same run, with 95% paired-bootstrap intervals.
Run from the repository root: python docs/results/2026-12-05-session41-h100/plot.py"""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import plot_final_accuracy, plot_head_curves, plot_task_ratios, plt, save_figure  # noqa: E402

S40 = here.parent / "2026-12-05-session40-h100"
# (label, head trained alone, its T = 0 bench)
HEADS = [("s40: all answers, hard labels", S40 / "domino_frozen_backbone", S40 / "bench5_t0"),
         ("s41: greedy answers only", here / "domino_frozen_backbone_greedy", here / "bench5_greedy"),
         ("s41: all answers, soft labels", here / "domino_frozen_backbone_soft", here / "bench5_t0")]

fig, (curve, acc, bench) = plt.subplots(1, 3, figsize=(17, 5.2))
plot_head_curves(curve, [(label, run) for label, run, _ in HEADS], "held-out gain over the backbone in training",
                 legend_size=8)
# session 41's two heads share one backbone
plot_final_accuracy(acc, [(label, run) for label, run, _ in HEADS],
                    [("s40 DFlash (the backbone)", HEADS[0][1], "C0"),
                     ("s41 DFlash (the backbone)", HEADS[1][1], "grey")], legend_size=7)
plot_task_ratios(bench, [(label, results) for label, _, results in HEADS], "bench, T = 0, 20 prompts a task")
save_figure(fig, here / "label_noise.png", "Qwen2.5-Coder-1.5B on an H100: without the T = 1 label noise a head "
            "alone gains a little more (bench 1.020x -> 1.026x greedy, 1.034x soft), far from 1.12x")
