"""steps_fair.png: session 47's steps-fair test (H100). Session 46's pair (a DFlash drafter of 1,200 steps, and a
soft-label head of 1,300 steps alone on it, frozen) each trained 1,200 more steps on the same answers at a peak
rate of 3e-4: DFlash continued (run dflash_fair) against the head continued on its unchanged backbone.
Left: held-out teacher-forced accepted length against each chain's steps (DFlash: its own; Domino: its head's, over
the 1,200-step backbone, dashed).
Middle: held-out teacher-forced accuracy per draft at the end of each run (64 records).
Right: the five-task T = 0 benches, MAT per task: session 46's DFlash (its own bench), the continued DFlash and the
continued head (this session's bench).
Run from the repository root: python docs/results/2026-12-06-session47-h100/plot.py"""

import pathlib
import sys

import numpy as np

here = pathlib.Path(__file__).parent
sys.path.insert(0, str(here.parent))
from domino_ratios import (BENCH_TASKS, DRAFT_NUMBERS, DRAFTS, bench_mats, draft_axes, plt, run_rows,  # noqa: E402
                           save_figure)

S46 = here.parent / "2026-12-06-session46-h100"
CHAINS = [("DFlash: s46 (1,200 steps), then continued (dflash_fair)",
           [(S46 / "dflash", 0), (here / "dflash_fair", 1200)]),
          ("Domino: s46 head (1,300 steps), then continued", [(S46 / "domino_frozen_backbone_soft", 0),
                                                               (here / "domino_frozen_backbone_soft", 1300)])]
FINAL = [("s46 DFlash (Domino's backbone)", S46 / "dflash", "acc"),
         ("s47 DFlash continued, 2,400 steps", here / "dflash_fair", "acc"),
         ("s47 Domino: head of 2,500 steps on s46 DFlash", here / "domino_frozen_backbone_soft", "acc")]
BARS = [("s46 DFlash", S46 / "bench5_t0", "dflash"), ("s47 DFlash continued", here / "bench5_t0", "dflash"),
        ("s47 Domino (head continued)", here / "bench5_t0", "domino_block_stop")]

fig, (curve, acc, bench) = plt.subplots(1, 3, figsize=(17, 5.2))
for i, (label, runs) in enumerate(CHAINS):
    evals = [(offset + r["step"], r["accept_len"]) for run, offset in runs for r in run_rows(run, "eval")]
    curve.plot(*zip(*evals), "o-", color=f"C{i}", label=label)
backbone = run_rows(S46 / "domino_frozen_backbone_soft", "eval")[-1]["base_accept_len"]
curve.axhline(backbone, color="grey", linestyle="--", label=f"Domino's frozen backbone (s46 DFlash): {backbone:.3f}")
curve.axvline(1250, color="black", linewidth=0.5)
curve.set_xlabel("training step of the chain (sessions 46, then 47)")
curve.set_ylabel("held-out teacher-forced accepted length")
curve.set_title("1,200 more steps each, peak rate 3e-4")
curve.legend(fontsize=8)

for i, (label, run, key) in enumerate(FINAL):
    acc.plot(DRAFT_NUMBERS, np.array(run_rows(run, "eval")[-1][key])[:DRAFTS], "o-", color=f"C{i + 2}", label=label)
acc.set_ylabel("held-out accuracy (teacher forced)")
acc.set_title("per draft, end of each run")
draft_axes((acc,), DRAFT_NUMBERS, legend_size=8)

width = 0.8 / len(BARS)
for i, (label, folder, method) in enumerate(BARS):
    mats = bench_mats(folder)
    tasks = BENCH_TASKS[:-1]
    values = [mats[t, method] for t in tasks] + [np.mean([mats[t, method] for t in tasks])]
    bench.bar([t + (i - (len(BARS) - 1) / 2) * width for t in range(len(values))], values, width,
              color=f"C{i + 2}", label=f"{label}: mean {values[-1]:.2f}")
bench.set_xticks(range(len(BENCH_TASKS)), BENCH_TASKS)
bench.set_ylabel("MAT (T = 0, 20 prompts a task)")
bench.set_ylim(1.0, None)
bench.set_title("benches, T = 0 (s46 DFlash: its own run)")
bench.legend(fontsize=8)
save_figure(fig, here / "steps_fair.png", "Qwen2.5-Coder-1.5B, H100: 1,200 more steps make DFlash 1.11x better on "
            "the bench; the same steps on the head leave Domino at 0.968x the continued DFlash")
