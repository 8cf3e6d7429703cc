"""chain.png: the bench's acceptance draft by draft (pooled over the 5 tasks) for session 18's 250-step pair and this
session's 600-step pair, and the held-out accept length over training. Run from the repo root."""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jspec.bench.report import draft_acceptance  # noqa: E402

here = pathlib.Path(__file__).parent
runs = {"session 18, 250 steps": here.parent / "2026-12-02-session18-h200",
        "session 19, 600 steps": here}
fig, (chain, held) = plt.subplots(1, 2, figsize=(11, 4))
for (label, run), style in zip(runs.items(), ("--", "-")):
    records = [json.loads(line) for line in open(run / "bench5_t0" / "results.jsonl")]
    for r in records:
        r["dataset"] = "all"  # pool the tasks
    for c in draft_acceptance(records, depth=4):  # deeper drafts have too few steps
        ps = [p for p in c["p"] if p is not None]
        chain.plot(range(1, len(ps) + 1), ps, style, marker="o", label=f"{c['method']}, {label}")
    for name, key in (("dflash", "accept_len"), ("domino_tf_curriculum", "accept_len")):
        evals = [json.loads(line) for line in open(run / name / "metrics.jsonl")]
        evals = [e for e in evals if e["split"] == "eval"]
        held.plot([e["step"] for e in evals], [e[key] for e in evals], style, marker="o", label=f"{name}, {label}")
chain.set_xlabel("draft k")
chain.set_ylabel("P(draft k accepted | draft k - 1 was)")
chain.set_title("5-task bench, T = 0")
chain.legend(fontsize=7)
held.set_xlabel("training step")
held.set_ylabel("held-out accept length")
held.set_title("held-out ShareGPT answers")
held.legend(fontsize=7)
fig.tight_layout()
fig.savefig(here / "chain.png", dpi=120)
