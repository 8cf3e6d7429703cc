"""head_alone.png: held-out teacher-forced accuracy per draft (left) and held-out walk MAT (right) of session 26's
DFlash drafter, session 26's jointly trained Domino, and session 27's Domino head trained alone on that DFlash
drafter (its first draft is DFlash's). Every run: 600 steps on the same data, eval at step 600 on the same 64 held-out
records. Run from the repository root: python docs/results/2026-12-03-session27-h200/plot.py"""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = pathlib.Path(__file__).parent
s26 = here.parent / "2026-12-03-session26-h200"
runs = {"DFlash (s26)": s26 / "dflash" / "metrics.jsonl",
        "Domino, joint (s26)": s26 / "domino_tf_curriculum" / "metrics.jsonl",
        "Domino, head alone (s27)": here / "domino_frozen_backbone" / "metrics.jsonl"}


def last(path: pathlib.Path, split: str) -> dict:
    return [r for r in map(json.loads, open(path)) if r["split"] == split][-1]


fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
for i, (label, path) in enumerate(runs.items()):
    acc = last(path, "eval")["acc"][:10]
    left.plot(range(1, len(acc) + 1), acc, marker="o", color=f"C{i}", label=label)
    walk = last(path, "walk")
    right.bar(i, walk["walk_mat"], color=f"C{i}")
    right.text(i, walk["walk_mat"] + 0.01, f"{walk['walk_mat']:.3f}", ha="center", fontsize=8)
left.set_xlabel("draft k")
left.set_ylabel("held-out accuracy of draft k (teacher forced)")
left.set_title("accuracy per draft, step 600")
left.legend(fontsize=8)
right.set_xticks(range(len(runs)), [label.replace(" (", "\n(") for label in runs], fontsize=8)
right.set_ylim(1.8, 2.2)
right.set_ylabel("held-out walk MAT")
right.set_title("decode loop replayed over held-out answers")
fig.suptitle("Qwen2.5-Coder-1.5B on an H200: a Domino head alone on a trained DFlash drafter", fontsize=10)
fig.tight_layout()
fig.savefig(here / "head_alone.png", dpi=120)
print(f"wrote {here / 'head_alone.png'}")
