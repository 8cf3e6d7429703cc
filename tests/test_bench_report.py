"""Bench summary arithmetic and the divergence diagnosis, on hand-made records."""

import json

import pytest

from jspec.bench.divergence import first_divergence
from jspec.bench.report import dataset_means, draft_acceptance, merge_runs, summarize, write_report
from jspec.errors import UserError


def _rec(method, tokens, steps, seconds, identical=True, gap=None, dataset="gsm8k"):
    rec = {"dataset": dataset, "method": method, "new_tokens": tokens, "steps": steps, "seconds": seconds,
           "identical": identical}
    if gap is not None:
        rec["divergence"] = {"at": 3, "gap": gap}
    return rec


def test_summary_is_token_weighted_and_relative_to_vanilla(tmp_path):
    records = [_rec("vanilla", 10, 10, 1.0), _rec("vanilla", 30, 30, 3.0),
               _rec("pld", 10, 5, 0.5), _rec("pld", 30, 10, 1.0, identical=False, gap=0.01),
               _rec("token_recycling", 40, 20, 2.0, identical=False, gap=1.5)]
    rows = {r["method"]: r for r in summarize(records)}
    assert rows["vanilla"]["mat"] == 1.0 and rows["vanilla"]["tok_per_s"] == 10.0
    assert rows["pld"]["mat"] == pytest.approx(40 / 15) and rows["pld"]["speedup"] == pytest.approx((40 / 1.5) / 10)
    assert rows["pld"]["identical"] == 0.5 and rows["pld"]["suspect_divergences"] == 0
    assert rows["token_recycling"]["suspect_divergences"] == 1
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    write_report(tmp_path, "# test")
    summary = (tmp_path / "summary.md").read_text()
    assert "| gsm8k | token_recycling | 1 | 2.00 | 20.0 | 100.00 | 2.00x | 0% | 1.500 **(suspect)** |  |  |" in summary
    assert "Mean over datasets" not in summary  # one dataset: the table above is the mean
    assert (tmp_path / "summary.png").stat().st_size > 1000


def test_loop_time_is_split_from_prefill_and_host_time(tmp_path):
    # 2 prompts: 11 + 21 steps (prefill's included), 0.3 + 0.5 s in the loop, 0.05 + 0.15 s outside it.
    records = [{**_rec("vanilla", 11, 11, 0.35), "prefill_seconds": 0.02, "loop_seconds": 0.3},
               {**_rec("vanilla", 21, 21, 0.65), "prefill_seconds": 0.1, "loop_seconds": 0.5}]
    [row] = summarize(records)
    assert row["loop_ms_per_step"] == pytest.approx(1e3 * 0.8 / 30)
    assert row["outside_loop_ms"] == pytest.approx(1e3 * 0.2 / 2)
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    write_report(tmp_path, "# test")
    assert "| 26.67 | 100.00 |" in (tmp_path / "summary.md").read_text()


def test_draft_acceptance_splits_the_chain_draft_by_draft(tmp_path):
    # The prefill's 1 is not a draft step: the draft steps accept 0, 1, 2, 0, 3 and 0 drafts.
    records = [{**_rec("vanilla", 5, 5, 1.0), "accepted": [1] * 5},
               {**_rec("dflash", 12, 6, 1.0), "accepted": [1, 1, 2, 3, 1, 4]},
               {**_rec("dflash", 2, 2, 1.0), "accepted": [1, 1]}, _rec("pld", 2, 1, 1.0)]
    [chain] = draft_acceptance(records)
    assert chain["method"] == "dflash" and chain["steps"] == 6
    assert chain["p"] == [pytest.approx(3 / 6), pytest.approx(2 / 3), pytest.approx(1 / 2), 0.0]
    assert chain["reach"] == [pytest.approx(3 / 6), pytest.approx(2 / 6), pytest.approx(1 / 6), 0.0]
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    write_report(tmp_path, "# test")
    summary = (tmp_path / "summary.md").read_text()
    assert "| gsm8k | dflash | 6 | 0.500 | 0.667 | 0.500 | 0.000 |" in summary
    # P(at least k drafts), k = 1..8: its sum is the draft steps' MAT - 1 ((1 + 2 + 3) / 6)
    assert "| gsm8k | dflash | 0.500 | 0.333 | 0.167 | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 |" in summary
    assert (tmp_path / "acceptance.png").stat().st_size > 1000
    empty = draft_acceptance([{**_rec("dflash", 1, 1, 1.0), "accepted": [1]}])[0]
    assert empty["p"] == [None] * 4 and empty["reach"] == [None] * 4


def test_sampled_runs_report_no_identical_rate(tmp_path):
    records = [_rec("vanilla", 10, 10, 1.0, identical=None), _rec("pld", 10, 5, 0.5, identical=None)]
    rows = {r["method"]: r for r in summarize(records)}
    assert rows["pld"]["identical"] is None and rows["pld"]["speedup"] == pytest.approx(2.0)
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    write_report(tmp_path, "# test")
    summary = (tmp_path / "summary.md").read_text()
    assert "| gsm8k | pld | 1 | 2.00 | 20.0 | 100.00 | 2.00x | n/a (sampled) | n/a |" in summary


def test_dataset_means_weight_each_dataset_once(tmp_path):
    records = [_rec("vanilla", 10, 10, 1.0), _rec("pld", 10, 5, 0.5),
               _rec("vanilla", 100, 100, 10.0, dataset="xsum"), _rec("pld", 100, 25, 2.5, dataset="xsum"),
               _rec("token_recycling", 100, 50, 5.0, dataset="xsum")]  # one dataset only: no mean row
    means = {m["method"]: m for m in dataset_means(summarize(records))}
    assert set(means) == {"vanilla", "pld"}
    assert means["pld"]["mat"] == pytest.approx((2 + 4) / 2) and means["pld"]["speedup"] == pytest.approx(3.0)
    assert means["pld"]["ms_per_step"] == pytest.approx(100.0)
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    write_report(tmp_path, "# test")
    assert "| pld | 3.00 | 3.00x | 100.00 |" in (tmp_path / "summary.md").read_text()


def _write_run(folder, records):
    folder.mkdir()
    (folder / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    write_report(folder, "# run\n\n`jspec bench --dataset " + folder.name + "`")


def test_merged_runs_keep_each_speedup_in_its_own_run(tmp_path):
    """Two GPUs, one dataset each, vanilla at different speeds: each speedup is against its own run's vanilla."""
    _write_run(tmp_path / "gsm8k", [_rec("vanilla", 10, 10, 1.0), _rec("pld", 10, 5, 0.5)])
    _write_run(tmp_path / "xsum", [_rec("vanilla", 100, 100, 20.0, dataset="xsum"),
                                   _rec("pld", 100, 25, 2.5, dataset="xsum")])
    rows = {(r["dataset"], r["method"]): r
            for r in merge_runs([tmp_path / "gsm8k", tmp_path / "xsum"], tmp_path / "merged")}
    assert rows["gsm8k", "pld"]["speedup"] == pytest.approx(2.0) and rows["xsum", "pld"]["speedup"] == 8.0
    summary = (tmp_path / "merged" / "summary.md").read_text()
    assert "`jspec bench --dataset gsm8k`" in summary and "`jspec bench --dataset xsum`" in summary
    assert "| pld | 3.00 | 5.00x |" in summary  # the mean over both datasets
    assert len((tmp_path / "merged" / "results.jsonl").read_text().splitlines()) == 4


def test_merging_refuses_a_dataset_measured_twice(tmp_path):
    _write_run(tmp_path / "a", [_rec("vanilla", 10, 10, 1.0)])
    _write_run(tmp_path / "b", [_rec("vanilla", 10, 10, 2.0)])
    with pytest.raises(UserError, match="gsm8k / vanilla is in both"):
        merge_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    with pytest.raises(UserError, match="cannot read results.jsonl"):
        merge_runs([tmp_path / "a", tmp_path / "missing"], tmp_path / "merged")


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2


@pytest.mark.real_model
def test_divergence_gap_on_the_real_model(smollm2_gguf):
    from jspec.bench.divergence import divergence_gap
    from jspec.decode import generate
    from jspec.models.loading import load_model

    m = load_model(str(smollm2_gguf), dtype="float32", progress=False)
    prompt = m.tokenizer.encode_chat([{"role": "user", "content": "Name a colour."}])
    ref = generate(m.graphdef, m.params, [prompt], max_new_tokens=6, max_cache_len=128).tokens[0]
    assert divergence_gap(m, prompt, ref, ref) is None
    other = ref[:2] + [(ref[2] + 1) % m.cfg.vocab_size] + ref[3:]
    d = divergence_gap(m, prompt, ref, other)
    assert d["at"] == 2 and d["gap"] > 0  # greedy picked the top-1 token, so the top-2 gap is positive
