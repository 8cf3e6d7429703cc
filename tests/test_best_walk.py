"""bench/best_walk.py: the run with the highest held-out walk MAT is chosen (its last walk row counts), runs without
a walk are skipped, and no walk at all is an error."""

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "best_walk.py"


def run_folder(root: pathlib.Path, name: str, rows: list[dict]) -> pathlib.Path:
    folder = root / name
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def pick(*folders: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, folders)], capture_output=True, text=True)


def test_highest_last_walk_wins(tmp_path):
    train = {"step": 10, "split": "train", "loss": 3.0}
    a = run_folder(tmp_path, "domino_a", [train, {"split": "walk", "walk_mat": 1.9},
                                          {"split": "walk", "walk_mat": 1.5}])
    b = run_folder(tmp_path, "domino_b", [train, {"split": "eval", "accept_len": 2.5},
                                          {"split": "walk", "walk_mat": 1.7}])
    c = run_folder(tmp_path, "domino_c", [train])  # no walk: listed, never chosen
    result = pick(a, b, c, tmp_path / "missing")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "domino_b"  # a's last walk (1.5) counts, not its earlier 1.9
    assert "domino_a: held-out walk MAT 1.500" in result.stderr
    assert "domino_c: held-out walk MAT none" in result.stderr


def test_no_walk_is_an_error(tmp_path):
    result = pick(run_folder(tmp_path, "domino_a", [{"split": "train", "loss": 3.0}]))
    assert result.returncode == 1 and result.stdout == ""
    assert "no run has a held-out walk" in result.stderr
