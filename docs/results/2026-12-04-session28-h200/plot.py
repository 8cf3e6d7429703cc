"""ratio_vs_strength.png: Domino's MAT over DFlash's against how strong the DFlash drafter is, sessions 25 to 28.
Left: held-out walk MAT (the decode loop replayed over 64 held-out answers), read from each run's metrics.jsonl.
Right: mean MAT of the T = 0 bench (20 prompts a task, 256 new tokens), read from each bench's results.jsonl; session
26's bench lost its fifth task, so its point is the mean of four. The dashed line is issue 5's goal (1.12).
Run from the repository root: python docs/results/2026-12-04-session28-h200/plot.py"""

import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = pathlib.Path(__file__).parent
results = here.parent
s25, s26, s27 = (results / f"2026-12-03-session{n}-h200" for n in (25, 26, 27))

# (label, DFlash run, Domino run): the Domino run's ratio is taken against the DFlash drafter it competes with
walks = [("s25 joint, from scratch", s25 / "dflash", s25 / "domino_tf_curriculum"),
         ("s26 joint, from target layers", s26 / "dflash", s26 / "domino_tf_curriculum"),
         ("s27 head alone on s26 DFlash", s26 / "dflash", s27 / "domino_frozen_backbone"),
         ("s28 joint, continued (DFlash 1,200 steps)", here / "dflash", here / "domino_tf_curriculum"),
         ("s28 head alone on s28 DFlash", here / "dflash", here / "domino_head_alone")]
benches = [("s25, 5 tasks", s25 / "bench5_t0"), ("s26, 4 tasks", s26 / "bench5_t0_partial"),
           ("s28, 5 tasks", here / "bench5_t0")]


def walk_mat(run: pathlib.Path) -> float:
    return [r for r in map(json.loads, open(run / "metrics.jsonl")) if r["split"] == "walk"][-1]["walk_mat"]


def mean_mats(bench: pathlib.Path) -> tuple[float, float]:
    """Mean over tasks of MAT = new tokens / steps, for dflash and domino_block."""
    tokens, steps = collections.Counter(), collections.Counter()
    for row in map(json.loads, open(bench / "results.jsonl")):
        tokens[row["dataset"], row["method"]] += row["new_tokens"]
        steps[row["dataset"], row["method"]] += row["steps"]
    tasks = sorted({task for task, _ in tokens})

    def mean(method: str) -> float:
        return sum(tokens[t, method] / steps[t, method] for t in tasks) / len(tasks)

    return mean("dflash"), mean("domino_block")


fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
for i, (label, dflash, domino) in enumerate(walks):
    base = walk_mat(dflash)
    ratio = walk_mat(domino) / base
    left.scatter(base, ratio, color=f"C{i}", label=f"{label}: {ratio:.3f}", marker="s" if "alone" in label else "o")
for i, (label, bench) in enumerate(benches):
    base, domino = mean_mats(bench)
    right.scatter(base, domino / base, color=f"C{i}", label=f"{label}: {domino / base:.3f}")
for ax, what in ((left, "held-out walk MAT"), (right, "bench mean MAT")):
    ax.axhline(1.12, color="grey", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xlabel(f"DFlash {what}")
    ax.set_ylabel(f"Domino / DFlash, {what}")
    ax.set_ylim(0.98, 1.15)
    ax.legend(fontsize=7, loc="upper right")
left.set_title("held out: 64 records, decode loop replayed")
right.set_title("T = 0 bench, 20 prompts a task")
fig.suptitle("Qwen2.5-Coder-1.5B on an H200: the stronger the DFlash drafter, the less the Domino head adds",
             fontsize=10)
fig.tight_layout()
fig.savefig(here / "ratio_vs_strength.png", dpi=120)
print(f"wrote {here / 'ratio_vs_strength.png'}")
