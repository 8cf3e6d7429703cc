"""Drafters shipped inside the package (`jspec/weights/<name>/`), found by name; anything else is a path."""

import pathlib

WEIGHTS_DIR = pathlib.Path(__file__).resolve().parents[1] / "weights"


def resolve_drafter(spec: str) -> str:
    """The directory of bundled drafter `spec`, or `spec` itself (a checkpoint path the loader will check)."""
    candidate = WEIGHTS_DIR / spec
    return str(candidate) if "/" not in spec and (candidate / "config.json").exists() else spec
