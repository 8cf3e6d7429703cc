"""init_layers.png: session 25 (draft layers from a random start) against session 26 (copies of the target's last
layers), same data and 600 steps each, T = 0, on the four tasks both benches finished. Left: MAT per task; right:
P(draft k accepted | draft k - 1 accepted), pooled over those tasks' steps. Run from the repository root:
python docs/results/2026-12-03-session26-h200/plot.py"""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jspec.bench.report import draft_acceptance, summarize  # noqa: E402 (run from the repository root)

here = pathlib.Path(__file__).parent
tasks = ["humaneval", "gsm8k", "mtbench", "alpaca"]
runs = {"s25 random start": here.parent / "2026-12-03-session25-h200" / "bench5_t0" / "results.jsonl",
        "s26 target layers": here / "bench5_t0_partial" / "results.jsonl"}
methods = {"dflash": "DFlash", "domino_block": "Domino"}

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
width = 0.2
for i, (run, path) in enumerate(runs.items()):
    records = [r for r in map(json.loads, open(path)) if r["dataset"] in tasks]
    mats = {(r["dataset"], r["method"]): r["mat"] for r in summarize(records)}
    for j, (method, label) in enumerate(methods.items()):
        x = np.arange(len(tasks)) + (2 * i + j - 1.5) * width
        left.bar(x, [mats[t, method] for t in tasks], width, label=f"{label}, {run}",
                 color=f"C{j}", alpha=0.45 if i == 0 else 0.95)
        (chain,) = draft_acceptance([{**r, "dataset": "pooled"} for r in records if r["method"] == method])
        right.plot(range(1, len(chain["p"]) + 1), chain["p"], marker="o", color=f"C{j}",
                   linestyle=":" if i == 0 else "-", label=f"{label}, {run}")
left.set_xticks(np.arange(len(tasks)), tasks)
left.set_ylabel("MAT (tokens per target forward)")
left.set_title("MAT per task, T = 0")
left.legend(fontsize=7)
right.set_xlabel("draft k")
right.set_ylabel("P(draft k accepted | draft k - 1 accepted)")
right.set_xticks([1, 2, 3, 4])
right.set_title("chain acceptance, pooled over the four tasks")
right.legend(fontsize=7)
fig.suptitle("Qwen2.5-Coder-1.5B on an H200: DFlash and Domino, 600 steps, random vs target-layer start", fontsize=10)
fig.tight_layout()
fig.savefig(here / "init_layers.png", dpi=120)
print(f"wrote {here / 'init_layers.png'}")
