"""Where jspec keeps installed assets and caches (override with JSPEC_HOME)."""

import os
import pathlib


def jspec_home() -> pathlib.Path:
    home = os.environ.get("JSPEC_HOME")
    path = pathlib.Path(home) if home else pathlib.Path.home() / ".cache" / "jspec"
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> pathlib.Path:
    return _sub("models")


def datasets_dir() -> pathlib.Path:
    return _sub("datasets")


def _sub(name: str) -> pathlib.Path:
    path = jspec_home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
