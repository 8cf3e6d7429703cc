"""bench/distilled_parts.sh: distilled data split into parts small enough for a device call, and back, checked."""

import os
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).parent.parent / "bench" / "distilled_parts.sh"


def _run(*args, part_size="64K"):
    env = {**os.environ, "PART_SIZE": part_size}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env)


@pytest.fixture
def work(tmp_path):
    root = tmp_path / "work"
    (root / "distill").mkdir(parents=True)
    (root / "distill" / "manifest.json").write_text('{"format": "jspec-distill-v1", "shards": 1}')
    (root / "distill" / "shard-00000.npz").write_bytes(os.urandom(200_000))  # incompressible: several parts
    (root / "task_data" / "gsm8k").mkdir(parents=True)
    (root / "task_data" / "gsm8k" / "manifest.json").write_text("{}")
    return root


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_pack_then_unpack_gives_the_same_folders(work, tmp_path):
    packed = _run("pack", work, tmp_path / "parts")
    assert packed.returncode == 0, packed.stderr
    parts = sorted((tmp_path / "parts").glob("distilled.tgz.part-*"))
    assert len(parts) >= 4 and all(p.stat().st_size <= 64 * 1024 for p in parts)
    unpacked = _run("unpack", tmp_path / "parts", tmp_path / "again")
    assert unpacked.returncode == 0, unpacked.stderr
    assert _files(tmp_path / "again") == _files(work)


def test_unpack_refuses_a_corrupt_or_missing_part(work, tmp_path):
    assert _run("pack", work, tmp_path / "parts").returncode == 0
    with open(tmp_path / "parts" / "distilled.tgz.part-01", "ab") as f:
        f.write(b"x")
    corrupt = _run("unpack", tmp_path / "parts", tmp_path / "a")
    assert corrupt.returncode == 2 and "a part is missing or corrupt" in corrupt.stderr
    assert not (tmp_path / "a").exists()
    (tmp_path / "parts" / "distilled.tgz.part-00").unlink()
    assert _run("unpack", tmp_path / "parts", tmp_path / "b").returncode == 2


def test_clear_errors_for_folders_that_are_not_distilled_data(tmp_path):
    nothing = _run("pack", tmp_path, tmp_path / "parts")
    assert nothing.returncode == 2 and "no distilled data" in nothing.stderr
    unsummed = _run("unpack", tmp_path, tmp_path / "w")
    assert unsummed.returncode == 2 and "has no SHA256SUM" in unsummed.stderr
