"""summary.md and plots from results.jsonl: MAT, tok/s, time per target step, speedup over vanilla (same run),
identical-to-vanilla rate, the per-method mean over datasets, each method's acceptance draft by draft (table and
acceptance.png), and each method's ratios over the baseline it builds on (jspec.bench.ratios)."""

import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jspec.bench.divergence import SUSPECT_GAP  # noqa: E402
from jspec.bench.ratios import paired_ratios  # noqa: E402

REACH_DEPTH = 8  # the deepest k of the report's P(at least k drafts accepted) table and acceptance.png


def summarize(records: list[dict]) -> list[dict]:
    """One row per (dataset, method): token-weighted MAT and tok/s, speedup vs that dataset's vanilla."""
    groups = collections.defaultdict(list)
    for r in records:
        groups[(r["dataset"], r["method"])].append(r)
    rows = []
    for (dataset, method), rs in groups.items():
        tokens = sum(r["new_tokens"] for r in rs)
        gaps = [r["divergence"]["gap"] for r in rs if r.get("divergence") and r["divergence"]["gap"] is not None]
        rows.append({"dataset": dataset, "method": method, "prompts": len(rs),
                     "mat": tokens / sum(r["steps"] for r in rs), "tok_per_s": tokens / sum(r["seconds"] for r in rs),
                     "ms_per_step": 1e3 * sum(r["seconds"] for r in rs) / sum(r["steps"] for r in rs),
                     "identical": None if any(r["identical"] is None for r in rs) else
                     sum(r["identical"] for r in rs) / len(rs),  # None: sampled (T > 0), nothing to compare
                     "suspect_divergences": sum(g > SUSPECT_GAP for g in gaps),
                     "max_divergence_gap": max(gaps, default=0.0), **_loop_split(rs)})
    vanilla = {r["dataset"]: r["tok_per_s"] for r in rows if r["method"] == "vanilla"}
    for r in rows:
        r["speedup"] = r["tok_per_s"] / vanilla[r["dataset"]] if r["dataset"] in vanilla else float("nan")
    return rows


def _loop_split(rs: list[dict]) -> dict:
    """Time per step inside the jitted loop (prefill's step excluded) and time per prompt outside it (prefill + host),
    which `ms_per_step` mixes; absent from records written before these fields existed."""
    if not all("loop_seconds" in r for r in rs):
        return {}
    loop_steps = sum(r["steps"] - 1 for r in rs)
    return {"loop_ms_per_step": 1e3 * sum(r["loop_seconds"] for r in rs) / max(loop_steps, 1),
            "outside_loop_ms": 1e3 * sum(r["seconds"] - r["loop_seconds"] for r in rs) / len(rs)}


def dataset_means(rows: list[dict]) -> list[dict]:
    """Per method, the unweighted mean over datasets of MAT, speedup and ms per step (each dataset counts once, as
    in the papers' task averages); only methods that ran on every dataset."""
    datasets = {r["dataset"] for r in rows}
    by_method = collections.defaultdict(list)
    for r in rows:
        by_method[r["method"]].append(r)
    return [{"method": m, "datasets": len(rs), **{k: sum(r[k] for r in rs) / len(rs)
                                                  for k in ("mat", "speedup", "ms_per_step")}}
            for m, rs in by_method.items() if len(rs) == len(datasets)]


def draft_acceptance(records: list[dict], depth: int = 4) -> list[dict]:
    """Per (dataset, method) with drafts, pooled over its decode steps: P(d1), the chance the first draft is
    accepted, then P(dk | dk-1), the chance draft k is accepted once draft k - 1 was (a tree's depth k). This splits
    MAT into the first draft and the chain after it. `reach`: P(at least k drafts accepted) for k = 1..depth, whose
    sum over all k is MAT − 1 (a head that corrects deep drafts shows there). `accepted` lists the tokens each
    target forward emitted, the prefill's first; records without it are skipped."""
    counts = collections.defaultdict(lambda: [0] * (depth + 1))  # counts[k]: steps that accepted >= k drafts
    for r in records:
        if r["method"] == "vanilla" or "accepted" not in r:
            continue
        c = counts[(r["dataset"], r["method"])]
        for emitted in r["accepted"][1:]:
            for k in range(min(emitted - 1, depth) + 1):
                c[k] += 1
    return [{"dataset": d, "method": m, "steps": c[0],
             "p": [c[k] / c[k - 1] if c[k - 1] else None for k in range(1, depth + 1)],
             "reach": [c[k] / c[0] if c[0] else None for k in range(1, depth + 1)]}  # P(>= k drafts accepted)
            for (d, m), c in counts.items()]


def write_report(out_dir: pathlib.Path, header: str = "") -> list[dict]:
    records = [json.loads(line) for line in open(out_dir / "results.jsonl", encoding="utf-8")]
    rows = summarize(records)
    lines = [header, "", "| dataset | method | prompts | MAT | tok/s | ms / step | speedup vs vanilla | "
             "identical to vanilla | max top-2 gap at a divergence | loop ms / step | outside-loop ms / prompt |",
             "|---" * 11 + "|"]
    for r in rows:
        gap = f"{r['max_divergence_gap']:.3f}" + (" **(suspect)**" if r["suspect_divergences"] else "")
        same = "n/a (sampled)" if r["identical"] is None else f"{100 * r['identical']:.0f}%"
        if r["identical"] is None:
            gap = "n/a"
        split = " | ".join(f"{r[k]:.2f}" if k in r else "" for k in ("loop_ms_per_step", "outside_loop_ms"))
        lines.append(f"| {r['dataset']} | {r['method']} | {r['prompts']} | {r['mat']:.2f} | {r['tok_per_s']:.1f} | "
                     f"{r['ms_per_step']:.2f} | {r['speedup']:.2f}x | {same} | {gap} | {split} |")
    means = dataset_means(rows)
    if len({r["dataset"] for r in rows}) > 1 and means:
        lines += ["", "Mean over datasets (each dataset counts once):", "",
                  "| method | MAT | speedup vs vanilla | ms / step |", "|---|---|---|---|"]
        lines += [f"| {m['method']} | {m['mat']:.2f} | {m['speedup']:.2f}x | {m['ms_per_step']:.2f} |" for m in means]
    chains = draft_acceptance(records, depth=REACH_DEPTH)
    if chains:
        lines += ["", "Acceptance draft by draft (pooled over steps; P(dk | dk-1): draft k accepted once draft k - 1 "
                  "was):", "", "| dataset | method | steps | P(d1) | P(d2 \\| d1) | P(d3 \\| d2) | P(d4 \\| d3) |",
                  "|---" * 7 + "|"]
        lines += [f"| {c['dataset']} | {c['method']} | {c['steps']} | "
                  + " | ".join("–" if p is None else f"{p:.3f}" for p in c["p"][:4]) + " |" for c in chains]
        lines += ["", "Drafts accepted per step: P(at least k drafts accepted), whose sum over all k is MAT − 1 "
                  "(acceptance.png plots it):", "",
                  "| dataset | method | " + " | ".join(f"k = {k}" for k in range(1, REACH_DEPTH + 1)) + " |",
                  "|---" * (REACH_DEPTH + 2) + "|"]
        lines += [f"| {c['dataset']} | {c['method']} | "
                  + " | ".join("–" if p is None else f"{p:.3f}" for p in c["reach"]) + " |" for c in chains]
        _plot_reach(chains, out_dir / "acceptance.png")
    relations = paired_ratios(records)
    if relations:
        lines += ["", "Each method over the baseline it builds on (ratio of the means over datasets, or per dataset; "
                  "95% interval from a paired bootstrap over prompts):", "",
                  "| method | over | dataset | MAT ratio | 95% | speed ratio | 95% |", "|---" * 7 + "|"]
        lines += [f"| {r['method']} | {r['base']} | {r['dataset']} | {r['mat_ratio']:.3f} | "
                  f"{r['mat_ci'][0]:.3f}–{r['mat_ci'][1]:.3f} | {r['speed_ratio']:.3f} | "
                  f"{r['speed_ci'][0]:.3f}–{r['speed_ci'][1]:.3f} |" for r in relations]
    lines += ["", f"A divergence from vanilla at a top-2 logit gap above {SUSPECT_GAP} is not a rounding near-tie: "
              "it is flagged as suspect (a bug)."]
    (out_dir / "summary.md").write_text("\n".join(lines).lstrip() + "\n", encoding="utf-8")
    _plot(rows, out_dir / "summary.png")
    return rows


def merge_runs(runs: list[pathlib.Path], out_dir: pathlib.Path) -> list[dict]:
    """One report from several `jspec bench` runs (e.g. one per GPU, split by dataset): their results.jsonl joined
    into `out_dir`. A (dataset, method) pair may come from one run only, so every speedup stays against the vanilla
    of the run that measured it."""
    from jspec.errors import UserError

    seen, records, commands = {}, [], []
    for run in runs:
        path = run / "results.jsonl"
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise UserError(f"bench run {run}: cannot read results.jsonl ({e.strerror or e})") from None
        try:
            run_records = [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: not JSON lines ({e})") from None
        for pair in {(r["dataset"], r["method"]) for r in run_records}:
            if pair in seen:
                raise UserError(f"{pair[0]} / {pair[1]} is in both {seen[pair]} and {run}: each dataset and method "
                                "must come from one run")
            seen[pair] = run
        records += run_records
        summary = run / "summary.md"
        command = next((line for line in summary.read_text(encoding="utf-8").splitlines() if line.startswith("`")),
                       None) if summary.exists() else None
        commands.append(f"- {run}: {command or '(no summary.md)'}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    header = (f"# jspec bench: {len(runs)} runs merged\n\nEach dataset's speedup is against vanilla in the run "
              "that measured it.\n\n" + "\n".join(commands))
    return write_report(out_dir, header)


def _plot_reach(chains: list[dict], path: pathlib.Path) -> None:
    """P(at least k drafts accepted) against k, one panel per dataset, one line per method (log scale: the deep
    drafts, where a correction head gains, are a few percent of the steps)."""
    datasets = list(dict.fromkeys(c["dataset"] for c in chains))
    methods = list(dict.fromkeys(c["method"] for c in chains))
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.2 * len(datasets) + 1, 3.6), squeeze=False, sharey=True)
    for ax, dataset in zip(axes[0], datasets):
        for j, method in enumerate(methods):
            for c in chains:
                if (c["dataset"], c["method"]) == (dataset, method):
                    ks = [k + 1 for k, p in enumerate(c["reach"]) if p]  # a log axis cannot show 0
                    ax.plot(ks, [c["reach"][k - 1] for k in ks], "o-", ms=3, color=f"C{j}", label=method)
        ax.set_yscale("log")
        ax.set_title(dataset, fontsize=9)
        ax.set_xlabel("k drafts")
    axes[0][0].set_ylabel("P(at least k drafts accepted)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot(rows: list[dict], path: pathlib.Path) -> None:
    datasets = sorted({r["dataset"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["dataset"], r["method"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(methods)
    for ax, key, label in ((axes[0], "speedup", "speedup over vanilla"), (axes[1], "mat", "mean accepted tokens")):
        for j, m in enumerate(methods):
            xs = [i + j * width for i in range(len(datasets))]
            ax.bar(xs, [by[(d, m)][key] if (d, m) in by else 0 for d in datasets], width, label=m)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(datasets))], datasets)
        ax.set_ylabel(label)
        ax.axhline(1.0, color="k", lw=0.5)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
