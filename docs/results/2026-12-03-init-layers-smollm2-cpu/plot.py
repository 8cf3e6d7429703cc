"""Held-out loss and first-draft accuracy of the three DFlash starts (python plot.py, from this folder)."""
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = pathlib.Path(__file__).parent
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
for name in ("random", "target-last", "target-first"):
    evals = [r for r in map(json.loads, (here / f"metrics_{name}.jsonl").read_text().splitlines())
             if r.get("split") == "eval"]
    steps = [r["step"] for r in evals]
    left.plot(steps, [r["loss"] for r in evals], marker="o", label=name)
    right.plot(steps, [r["acc"][0] for r in evals], marker="o", label=name)
left.set(xlabel="step", ylabel="held-out loss")
right.set(xlabel="step", ylabel="held-out accuracy, draft 1")
left.legend(fontsize=8)
fig.suptitle("DFlash (3 layers) on SmolLM2-135M, CPU: where the draft layers start", fontsize=10)
fig.tight_layout()
fig.savefig(here / "init_layers.png", dpi=120)
