"""bench/parts.sh: folders split into parts small enough for a device call, sent a few at a time, and put back."""

import json
import os
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).parent.parent / "bench" / "parts.sh"


def _run(*args, **env):
    env = {**os.environ, "PART_SIZE": "64K", **env}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env)


@pytest.fixture
def work(tmp_path):
    root = tmp_path / "work"
    (root / "distill").mkdir(parents=True)
    (root / "distill" / "manifest.json").write_text('{"format": "jspec-distill-v1", "shards": 1}')
    (root / "distill" / "shard-00000.npz").write_bytes(os.urandom(200_000))  # incompressible: several parts
    (root / "task_data" / "gsm8k").mkdir(parents=True)
    (root / "task_data" / "gsm8k" / "manifest.json").write_text("{}")
    (root / "other").mkdir()
    (root / "other" / "left-out").write_text("not packed")
    return root


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("compress", ["1", "0"])
def test_pack_send_in_batches_then_unpack_gives_the_same_folders(work, tmp_path, compress):
    packed = _run("pack", work, tmp_path / "results" / "distilled", "distill", "task_data", COMPRESS=compress)
    assert packed.returncode == 0, packed.stderr
    parts = sorted((tmp_path / "results" / "distilled").glob("part-*"))
    assert len(parts) >= 4 and all(p.stat().st_size <= 64 * 1024 for p in parts)
    polls = []
    for call in range(len(parts)):  # two parts a device call, each call's $OUT fresh
        polls.append(tmp_path / f"out{call}" / "distilled")
        sent = _run("send", tmp_path / "results" / "distilled", 2, OUT=str(polls[-1].parent))
        assert sent.returncode == 0, sent.stderr
        assert len(list(polls[-1].glob("part-*"))) == min(2, len(parts) - 2 * call)
        if "(0 left)" in sent.stdout:
            break
    assert len(polls) == (len(parts) + 1) // 2
    gaps = _run("gather", tmp_path / "back", *polls[1:])
    assert gaps.returncode == 2 and "lacks 2 parts: part-000 part-001" in gaps.stderr
    gathered = _run("gather", tmp_path / "back", *polls)
    assert gathered.returncode == 0, gathered.stderr
    assert sorted(p.name for p in (tmp_path / "back").glob("part-*")) == [p.name for p in parts]
    unpacked = _run("unpack", tmp_path / "back", tmp_path / "again")
    assert unpacked.returncode == 0, unpacked.stderr
    want = {k: v for k, v in _files(work).items() if not k.startswith("other")}
    assert _files(tmp_path / "again") == want


def test_unpack_refuses_a_corrupt_or_missing_part(work, tmp_path):
    assert _run("pack", work, tmp_path / "parts", "distill").returncode == 0
    with open(tmp_path / "parts" / "part-001", "ab") as f:
        f.write(b"x")
    corrupt = _run("unpack", tmp_path / "parts", tmp_path / "a")
    assert corrupt.returncode == 2 and "a part is missing or corrupt" in corrupt.stderr
    assert not (tmp_path / "a").exists()
    (tmp_path / "parts" / "part-000").unlink()
    assert _run("unpack", tmp_path / "parts", tmp_path / "b").returncode == 2


def test_clear_errors(work, tmp_path):
    missing = _run("pack", work, tmp_path / "parts", "distill", "nothing")
    assert missing.returncode == 2 and "no nothing in" in missing.stderr
    unsummed = _run("unpack", tmp_path, tmp_path / "w")
    assert unsummed.returncode == 2 and "has no SHA256SUM" in unsummed.stderr
    unpacked = _run("send", tmp_path / "nothing", OUT=str(tmp_path / "out"))
    assert unpacked.returncode == 2 and "nothing packed yet" in unpacked.stderr


def test_carry_lists_fill_each_device_call_up_to_its_budget(work, tmp_path):
    """scripts/device_stage.sh carry: packed parts in groups of at most CARRY_MIB, the SHA256SUM with the last."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    stage = repo / "scripts" / "device_stage.sh"
    stage.write_bytes((SCRIPT.parent.parent / "scripts" / "device_stage.sh").read_bytes())
    assert _run("pack", work, repo / ".stage" / "drafters", "distill", PART_SIZE="400K").returncode == 0
    parts = sorted(p.name for p in (repo / ".stage" / "drafters").glob("part-*"))
    assert len(parts) == 1  # 200 kB of shard and a manifest: one part; add four more of 450 KiB
    for i in range(1, 5):
        (repo / ".stage" / "drafters" / f"part-{i:03d}").write_bytes(os.urandom(450 << 10))

    def carry(*args):
        return subprocess.run(["bash", str(stage), "carry", *args], capture_output=True, text=True,
                              env={**os.environ, "CARRY_MIB": "1"})

    listed = carry("drafters")
    assert listed.returncode == 0, listed.stderr
    calls = [line for line in listed.stdout.splitlines() if line.startswith("call ")]
    carried = [json.loads(line.split("carry ", 1)[1]) for line in calls]
    folder = ".stage/drafters/"
    assert carried == [[folder + "part-000", folder + "part-001"], [folder + "part-002", folder + "part-003"],
                       [folder + "part-004", folder + "SHA256SUM"]]
    assert listed.stdout.count("mv .stage/drafters/* /root/bg/.stage/drafters/") == 3
    missing = carry("nothing")
    assert missing.returncode == 2 and ".stage/nothing has no SHA256SUM" in missing.stderr


def test_carry_folders_groups_whole_folders_by_size_and_path_count(tmp_path):
    """scripts/device_stage.sh carry-folders: whole .stage folders, largest first, each call within CARRY_MIB and 7
    paths; a folder larger than a call is refused with the way out (pack it, carry its parts)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    stage = repo / "scripts" / "device_stage.sh"
    stage.write_bytes((SCRIPT.parent.parent / "scripts" / "device_stage.sh").read_bytes())
    sizes_kib = {"big": 700, "mid": 400, "small": 200, **{f"tiny{i}": 10 for i in range(8)}}
    for name, kib in sizes_kib.items():
        (repo / ".stage" / name / "sub").mkdir(parents=True)
        (repo / ".stage" / name / "sub" / "data").write_bytes(os.urandom(kib << 10))

    def carry(*names, mib="1"):
        return subprocess.run(["bash", str(stage), "carry-folders", *names], capture_output=True, text=True,
                              env={**os.environ, "CARRY_MIB": mib})

    listed = carry(*sizes_kib)
    assert listed.returncode == 0, listed.stderr
    calls = [line for line in listed.stdout.splitlines() if line.startswith("call ")]
    carried = [json.loads(line.split("carry ", 1)[1]) for line in calls]
    assert carried[0] == [".stage/big"]  # 700 + 400 KiB would pass 1 MiB
    assert carried[1][:2] == [".stage/mid", ".stage/small"]
    assert all(len(call) <= 7 for call in carried)
    assert sorted(p for call in carried for p in call) == sorted(f".stage/{n}" for n in sizes_kib)
    for call in carried:
        assert sum(sizes_kib[p.split("/")[1]] for p in call) <= 1024
    assert f"cp -r {' '.join(carried[0])} /root/bg/.stage/" in listed.stdout
    too_big = carry("big", mib="0")
    assert too_big.returncode != 0 and "more than a call's CARRY_MIB" in too_big.stderr
    missing = carry("nothing")
    assert missing.returncode == 2 and ".stage/nothing: no such folder" in missing.stderr
