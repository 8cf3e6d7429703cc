"""ratio_vs_strength.png: Domino's MAT over DFlash's against the DFlash drafter's own MAT, sessions 25 to 29.
Left: held-out walk MAT (the decode loop replayed over the same 64 held-out answers), from each run's metrics.jsonl.
Right: MAT of the T = 0 bench on HumanEval and GSM8K (20 prompts each, 256 new tokens), the two tasks that this
session's bench finished, from each bench's results.jsonl. Sessions 25, 26 and 28 ran the head on drafts 1-6 only
(HEAD_DRAFTS=6); session 29 ran the whole head. The dashed line is issue 5's goal (1.12).
Run from the repository root: python docs/results/2026-12-04-session29-h200/plot.py"""

import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = pathlib.Path(__file__).parent
results = here.parent
s25, s26, s27 = (results / f"2026-12-03-session{n}-h200" for n in (25, 26, 27))
s28 = results / "2026-12-04-session28-h200"

# (label, DFlash run, Domino run): each Domino run against the DFlash drafter it competes with
walks = [("s25 joint, from scratch", s25 / "dflash", s25 / "domino_tf_curriculum"),
         ("s26 joint, from target layers", s26 / "dflash", s26 / "domino_tf_curriculum"),
         ("s27 head alone on s26 DFlash", s26 / "dflash", s27 / "domino_frozen_backbone"),
         ("s28 joint, continued", s28 / "dflash", s28 / "domino_tf_curriculum"),
         ("s28 head alone on s28 DFlash", s28 / "dflash", s28 / "domino_head_alone"),
         ("s29 joint, continued with follow-up turns", here / "dflash", here / "domino_tf_curriculum")]
benches = [("s25", s25 / "bench5_t0"), ("s26", s26 / "bench5_t0_partial"), ("s28", s28 / "bench5_t0"),
           ("s29, whole head", here / "bench5_t0_partial")]
tasks = ("humaneval", "gsm8k")


def walk_mat(run: pathlib.Path) -> float:
    return [r for r in map(json.loads, open(run / "metrics.jsonl")) if r["split"] == "walk"][-1]["walk_mat"]


def task_mats(bench: pathlib.Path) -> dict[tuple[str, str], float]:
    """MAT = new tokens / steps per (task, method)."""
    tokens, steps = collections.Counter(), collections.Counter()
    for row in map(json.loads, open(bench / "results.jsonl")):
        tokens[row["dataset"], row["method"]] += row["new_tokens"]
        steps[row["dataset"], row["method"]] += row["steps"]
    return {key: tokens[key] / steps[key] for key in tokens}


fig, (left, right) = plt.subplots(1, 2, figsize=(12, 6))
for i, (label, dflash, domino) in enumerate(walks):
    base = walk_mat(dflash)
    ratio = walk_mat(domino) / base
    left.scatter(base, ratio, color=f"C{i}", label=f"{label}: {ratio:.3f}", marker="s" if "alone" in label else "o")
for i, (label, bench) in enumerate(benches):
    mats = task_mats(bench)
    for task, marker in zip(tasks, "o^"):
        base = mats[task, "dflash"]
        ratio = mats[task, "domino_block"] / base
        right.scatter(base, ratio, color=f"C{i}", marker=marker, label=f"{label} {task}: {ratio:.3f}")
for ax, what in ((left, "held-out walk MAT"), (right, "bench MAT")):
    ax.axhline(1.12, color="grey", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xlabel(f"DFlash {what}")
    ax.set_ylabel(f"Domino / DFlash, {what}")
    ax.set_ylim(0.98, 1.15)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
left.set_title("held out: 64 records, decode loop replayed")
right.set_title("T = 0 bench, HumanEval (o) and GSM8K (^), 20 prompts each")
fig.suptitle("Qwen2.5-Coder-1.5B on an H200: Domino's gain over DFlash, sessions 25-29", fontsize=10)
fig.tight_layout()
fig.savefig(here / "ratio_vs_strength.png", dpi=120)
print(f"wrote {here / 'ratio_vs_strength.png'}")
