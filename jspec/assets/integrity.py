"""Keeping asset files whole and trusted: streaming sha256, the sidecar that remembers a good hash, atomic writes."""

import contextlib
import hashlib
import json
import os
import pathlib
import sys
import uuid
from collections.abc import Iterator
from typing import IO, Any

from tqdm import tqdm

_CHUNK = 8 << 20


def chunks(path: pathlib.Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def progress_bar(total: int, desc: str, progress: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=not progress, file=sys.stderr)


def sha256_file(path: pathlib.Path, progress: bool) -> str:
    digest = hashlib.sha256()
    with progress_bar(path.stat().st_size, f"sha256 {path.name}", progress) as bar:
        for chunk in chunks(path):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


# A sidecar records a successful full hash keyed by (size, mtime), so a 1 GB GGUF is not re-hashed on every load.
def _stamp_file(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name + ".verified")


def _stamp(path: pathlib.Path, sha256: str) -> dict[str, Any]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def remember_verified(path: pathlib.Path, sha256: str) -> None:
    _stamp_file(path).write_text(json.dumps(_stamp(path, sha256)), encoding="utf-8")


def verified_before(path: pathlib.Path, sha256: str) -> bool:
    try:
        return json.loads(_stamp_file(path).read_text(encoding="utf-8")) == _stamp(path, sha256)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def atomic_writer(dest: pathlib.Path) -> Iterator[IO[bytes]]:
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
