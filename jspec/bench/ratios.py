"""How much a method gains over the method it builds on (Domino over DFlash, Graft over EAGLE-3, ...), with a 95%
interval from a paired bootstrap over prompts: the issues' goals are such ratios, and 20 prompts a task leave them
uncertain by a few percent.

The point estimates are the bench summary's: per dataset, token-weighted MAT and tok/s over the prompts; the mean
over datasets (each counts once) of MAT and of the speedup over that dataset's vanilla; the ratio of those means.
Each bootstrap replicate redraws every dataset's prompts with replacement, the same draw for all three methods
(method, its baseline, vanilla), so prompt difficulty cancels in the ratio."""

import collections

import numpy as np

# method -> the baseline its goal is stated against
BASELINES = {"domino": "dflash", "domino_topk": "dflash", "domino_block": "dflash", "domino_block_stop": "dflash",
             "graft_tail": "dflash", "graft": "eagle3", "graft_fixed": "eagle3", "eagle3_pruned": "eagle3"}
MEAN = "mean"  # the dataset name of the mean-over-datasets row


def paired_ratios(records: list[dict], reps: int = 2000, seed: int = 0) -> list[dict]:
    """One row per (method, baseline, dataset), and a `MEAN` row per pair when it ran on several datasets: the MAT
    ratio and the speedup ratio, each with its 2.5% and 97.5% bootstrap quantiles. Pairs need both methods and
    vanilla on the same prompts (by `id`) of a dataset; other datasets are left out of that pair."""
    table = collections.defaultdict(dict)  # (dataset, method) -> {prompt id: (tokens, steps, seconds)}
    for r in records:
        if "id" in r:  # records without prompt ids cannot be paired
            table[r["dataset"], r["method"]][r["id"]] = (r["new_tokens"], r["steps"], r["seconds"])
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    methods = list(dict.fromkeys(r["method"] for r in records))
    rng = np.random.default_rng(seed)
    rows = []
    for method in methods:
        base = BASELINES.get(method)
        if base not in methods:
            continue
        per_dataset = {}  # dataset -> (point, replicates) of (MAT, speedup) for method and base
        for dataset in datasets:
            trio = [table.get((dataset, m), {}) for m in (method, base, "vanilla")]
            ids = sorted(set(trio[0]) & set(trio[1]) & set(trio[2]))
            if not ids:
                continue
            stats = np.array([[t[i] for i in ids] for t in trio], np.float64)  # [3 methods, prompts, 3 stats]
            draws = rng.integers(0, len(ids), (reps, len(ids)))
            per_dataset[dataset] = (_mat_speedup(stats.sum(axis=1)[:, None]),
                                    _mat_speedup(stats[:, draws].sum(axis=2)))
        for dataset, (point, replicates) in per_dataset.items():
            rows.append(_row(method, base, dataset, point, replicates))
        if len(per_dataset) > 1:
            point = np.mean([p for p, _ in per_dataset.values()], axis=0)
            replicates = np.mean([r for _, r in per_dataset.values()], axis=0)
            rows.append(_row(method, base, MEAN, point, replicates))
    return rows


def _mat_speedup(sums: np.ndarray) -> np.ndarray:
    """[3, R, 3] summed (tokens, steps, seconds) of method, base, vanilla -> [R, 2, 2]: (MAT, speedup) of method
    and base in each replicate."""
    tokens, steps, seconds = sums[..., 0], sums[..., 1], sums[..., 2]
    tok_per_s = tokens / seconds
    mat, speedup = tokens[:2] / steps[:2], tok_per_s[:2] / tok_per_s[2]
    return np.stack([mat, speedup], axis=-1).transpose(1, 0, 2)  # [R, {method, base}, {MAT, speedup}]


def _row(method: str, base: str, dataset: str, point: np.ndarray, replicates: np.ndarray) -> dict:
    ratio = point[0, 0] / point[0, 1]  # [{MAT, speedup}]
    lo, hi = np.quantile(replicates[:, 0] / replicates[:, 1], [0.025, 0.975], axis=0)
    return {"method": method, "base": base, "dataset": dataset,
            "mat_ratio": float(ratio[0]), "mat_ci": (float(lo[0]), float(hi[0])),
            "speed_ratio": float(ratio[1]), "speed_ci": (float(lo[1]), float(hi[1]))}
