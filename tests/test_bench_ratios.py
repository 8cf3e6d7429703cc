"""Paired-bootstrap ratios of a method over its baseline (jspec.bench.ratios) on hand-made bench records."""

import json

import numpy as np
import pytest

from jspec.bench.ratios import MEAN, paired_ratios
from jspec.bench.report import dataset_means, summarize, write_report


def _rec(method, dataset, pid, tokens, steps, seconds):
    return {"method": method, "dataset": dataset, "id": pid, "new_tokens": tokens, "steps": steps,
            "seconds": seconds, "identical": True}


def _records(seed=0, gain=1.1, datasets=("gsm8k", "humaneval"), prompts=12):
    """dflash, domino (MAT `gain` times dflash's on every prompt, 2% slower steps) and vanilla, prompts of varied
    difficulty."""
    rng = np.random.default_rng(seed)
    out = []
    for d in datasets:
        for i in range(prompts):
            tokens, mat = 200, rng.uniform(1.5, 3.5)
            steps = tokens / mat
            out += [_rec("vanilla", d, i, tokens, tokens, tokens * 1e-3),
                    _rec("dflash", d, i, tokens, steps, steps * 1.5e-3),
                    _rec("domino", d, i, tokens, steps / gain, steps / gain * 1.53e-3)]
    return out


def test_point_estimates_are_the_bench_summarys_ratios_of_means():
    records = _records(seed=1)
    rows = {(r["method"], r["dataset"]): r for r in paired_ratios(records, reps=200)}
    means = {m["method"]: m for m in dataset_means(summarize(records))}
    mean = rows["domino", MEAN]
    assert mean["base"] == "dflash"
    assert mean["mat_ratio"] == pytest.approx(means["domino"]["mat"] / means["dflash"]["mat"])
    assert mean["speed_ratio"] == pytest.approx(means["domino"]["speedup"] / means["dflash"]["speedup"])
    by = {(r["dataset"], r["method"]): r for r in summarize(records)}
    assert rows["domino", "gsm8k"]["mat_ratio"] == pytest.approx(by["gsm8k", "domino"]["mat"] /
                                                                   by["gsm8k", "dflash"]["mat"])
    assert {k for k in rows} == {("domino", d) for d in ("gsm8k", "humaneval", MEAN)}  # dflash has no baseline


def test_a_uniform_gain_has_no_uncertainty_and_a_varied_one_has_some():
    rows = {r["dataset"]: r for r in paired_ratios(_records(gain=1.1), reps=300)}
    assert rows[MEAN]["mat_ratio"] == pytest.approx(1.1)
    assert rows[MEAN]["mat_ci"] == pytest.approx((1.1, 1.1))  # every prompt gains 1.1x: every redraw does too
    assert rows[MEAN]["speed_ratio"] == pytest.approx(1.1 / 1.02)
    varied = _records(gain=1.1)
    rng = np.random.default_rng(5)
    for r in varied:
        if r["method"] == "domino":
            r["steps"] *= rng.uniform(0.8, 1.25)  # per-prompt gains scattered around 1.1x
    row = {r["dataset"]: r for r in paired_ratios(varied, reps=2000)}[MEAN]
    lo, hi = row["mat_ci"]
    assert lo < row["mat_ratio"] < hi and 0.01 < hi - lo < 0.2


def test_pairs_only_the_prompts_all_three_ran():
    records = [r for r in _records(prompts=4, datasets=("gsm8k",)) if not (r["method"] == "domino" and r["id"] == 3)]
    for r in records:
        if r["method"] == "dflash" and r["id"] == 3:
            r["steps"] = 10  # far off the others: a pairing bug would show in the ratio
    [row] = paired_ratios(records, reps=100)  # one dataset: no mean row
    by = {r["method"]: r for r in summarize([r for r in records if r["id"] != 3])}
    assert row["dataset"] == "gsm8k" and row["mat_ratio"] == pytest.approx(by["domino"]["mat"] / by["dflash"]["mat"])
    assert paired_ratios([r for r in records if r["method"] != "dflash"]) == []  # no baseline, no row


def test_the_bench_summary_prints_the_ratios(tmp_path):
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records(gain=1.1)))
    write_report(tmp_path, "# test")
    summary = (tmp_path / "summary.md").read_text()
    assert "| domino | dflash | mean | 1.100 | 1.100–1.100 | 1.078 | 1.078–1.078 |" in summary
