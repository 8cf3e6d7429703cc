"""Shared by the bench scripts that run decoding methods on a real model: the model/method/dataset flags and the
methods they name, each with its drafter and optional saved state."""

import argparse
from collections.abc import Iterator
from typing import Any

from jspec.methods import EAGLE3_METHODS, Method, build
from jspec.models.loading import LoadedModel


def add_method_arguments(ap: argparse.ArgumentParser, methods: str) -> None:
    """--model, --methods (default `methods`), --dataset, --dtype, --eagle3-drafter, --method-state."""
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--methods", default=methods)
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--eagle3-drafter", help="EAGLE-3 checkpoint of eagle3 / eagle3_pruned / graft")
    ap.add_argument("--method-state", action="append", default=[], metavar="METHOD=PATH",
                    help="start METHOD from a saved state (e.g. graft=calibrated.npz from `jspec calibrate`)")


def built_methods(args: argparse.Namespace, model: LoadedModel) -> Iterator[tuple[str, Method, Any, Any]]:
    """(name, method, method params, saved state or None) for each of --methods."""
    saved = dict(spec.split("=", 1) for spec in args.method_state)
    for name in args.methods.split(","):
        method, params = build(name, model, args.eagle3_drafter if name in EAGLE3_METHODS else None)
        yield name, method, params, method.load_state(saved[name]) if name in saved else None
