"""Argument types shared by the `jspec` subcommands: one-line errors, counts, dataset and folder lists, dtypes."""

import argparse
import pathlib

from jspec.bench.datasets import DATASETS
from jspec.errors import UserError


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's default prints usage + exits 2; the contract wants one line
        raise UserError(message)


def positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def count_or_all(name: str):
    count = positive_int(name)
    return lambda text: None if text == "all" else count(text)


def dataset_names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no dataset")
    for name in names:
        if name not in DATASETS:
            raise argparse.ArgumentTypeError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"names a dataset twice: {value!r}")
    return names


def data_folders(value: str) -> list[pathlib.Path]:
    folders = [pathlib.Path(v.strip()) for v in value.split(",") if v.strip()]
    if not folders:
        raise argparse.ArgumentTypeError("names no folder")
    return folders


def resolve_dtype(value: str) -> str:
    """`auto`: float32 on CPU, where bfloat16 is emulated and slow, else bfloat16."""
    if value != "auto":
        return value
    import jax

    return "float32" if jax.default_backend() == "cpu" else "bfloat16"
