"""ratio_vs_base.png: per task, Domino's MAT over DFlash's against DFlash's MAT, for the bench runs of sessions 16-22
(left), and the same runs' gain on the drafted tokens alone, (MAT_domino - 1) / (MAT_dflash - 1) (right). Run from
the repo root: python docs/results/2026-12-03-session22-h200/plot.py"""

import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jspec.bench.report import summarize  # noqa: E402 (run from the repository root)

here = pathlib.Path(__file__).parent
runs = {"s16, 250 steps": here.parent / "2026-12-02-session16-h200" / "bench5_k32",
        "s18, 250 steps": here.parent / "2026-12-02-session18-h200" / "bench5_t0",
        "s19, 600 steps": here.parent / "2026-12-02-session19-h200" / "bench5_t0",
        "s22, 400 steps + task data": here / "bench5_t0",
        "s22, T = 1": here / "bench5_t1"}


def task_mats(folder: pathlib.Path) -> dict[str, dict[str, float]]:
    """dataset -> method -> MAT pooled over the dataset's prompts (the bench summary's rows)."""
    mats = collections.defaultdict(dict)
    for row in summarize([json.loads(line) for line in open(folder / "results.jsonl")]):
        mats[row["dataset"]][row["method"]] = row["mat"]
    return mats


fig, (ratio, drafted) = plt.subplots(1, 2, figsize=(11, 4.2))
for label, folder in runs.items():
    mats = task_mats(folder)
    base = [m["dflash"] for m in mats.values()]
    domino = [m["domino_block"] for m in mats.values()]
    ratio.scatter(base, [o / d for o, d in zip(domino, base)], label=label)
    drafted.scatter(base, [(o - 1) / (d - 1) for o, d in zip(domino, base)], label=label)
    for name, d, o in zip(mats, base, domino):
        if label.startswith("s22, 400"):
            ratio.annotate(name, (d, o / d), fontsize=7, xytext=(3, 3), textcoords="offset points")
ratio.axhline(1.12, color="gray", linestyle="--", linewidth=1)
ratio.text(1.13, 1.122, "goal 1.12", fontsize=7, color="gray")
ratio.set_xlabel("DFlash MAT on the task")
ratio.set_ylabel("MAT(domino_block) / MAT(dflash)")
ratio.set_title("MAT ratio per task (5-task bench)")
ratio.legend(fontsize=7)
drafted.set_xlabel("DFlash MAT on the task")
drafted.set_ylabel("(MAT_domino - 1) / (MAT_dflash - 1)")
drafted.set_title("gain on the drafted tokens alone")
fig.tight_layout()
fig.savefig(here / "ratio_vs_base.png", dpi=120)
