"""bench/plot_ablation.py on hand-written bench records: token-weighted MAT per variant, the headless rows labelled
"head off" and listed first, and one table row + one plot per call."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.plot_ablation import ablation_rows, write  # noqa: E402


def record(dataset, method, tokens, steps, seconds):
    return {"dataset": dataset, "method": method, "new_tokens": tokens, "steps": steps, "seconds": seconds,
            "identical": True}


def write_folder(root: pathlib.Path, variant: str, records: list[dict]) -> pathlib.Path:
    folder = root / f"ablation_{variant}"
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_rows_and_outputs(tmp_path):
    cur = write_folder(tmp_path, "tf_curriculum", [
        record("gsm8k", "vanilla", 100, 100, 1.0), record("gsm8k", "domino", 60, 40, 1.0),
        record("gsm8k", "domino", 40, 10, 1.0),  # token-weighted: 100 tokens / 50 steps
        record("gsm8k", "domino_headless", 90, 60, 1.0), record("gsm8k", "dflash", 80, 64, 1.0)])
    tf = write_folder(tmp_path, "tf", [record("gsm8k", "vanilla", 100, 100, 1.0),
                                       record("gsm8k", "domino", 75, 50, 0.5),
                                       record("gsm8k", "dflash", 10, 10, 1.0)])  # a second DFlash row is ignored
    rows = ablation_rows([cur, tf])
    assert [r["variant"] for r in rows] == ["DFlash", "head off", "TF + curriculum", "TF"]
    assert [r["mat"] for r in rows] == pytest.approx([1.25, 1.5, 2.0, 1.5])
    assert rows[3]["speedup"] == pytest.approx(1.5)  # 150 tok/s against vanilla's 100
    write(rows, tmp_path / "ablation")
    table = (tmp_path / "ablation.md").read_text().splitlines()
    assert table[4] == "| TF + curriculum | 2.00 | 0.50x | 2.00 |"
    assert (tmp_path / "ablation.png").stat().st_size > 0
    write(rows, tmp_path / "mat_only", mat_only=True)
    table = (tmp_path / "mat_only.md").read_text().splitlines()
    assert table[0] == "| variant | gsm8k MAT | mean MAT |"
    assert table[4] == "| TF + curriculum | 2.00 | 2.00 |"
