"""Shared by the bench scripts that run decoding methods on a real model: the model/method/dataset flags and the
methods they name, each with its drafter and optional saved state."""

import argparse
from collections.abc import Iterator
from typing import Any

from jspec.errors import UserError
from jspec.methods import EAGLE3_METHODS, Method, build, dflash_method
from jspec.models.loading import LoadedModel

BLOCK_LABELS = ("dflash", "domino", "domino_topk", "domino_block", "domino_block_stop", "domino_headless",
                "graft_tail")  # bench labels


def label_options(label: str, candidates: int, full_block: bool = False, chunk: int = 0,
                  xla_select: bool = False, head_drafts: int = 0, head_stop: float = 0.05) -> dict:
    """The method options of a bench label, as `jspec bench` sets them (its --candidates, --full-block,
    --candidate-chunk, --head-drafts and --head-stop, the threshold of domino_block_stop); `xla_select`: the GPU
    head kernels take their candidates from XLA's sorts."""
    topk = {"candidates": candidates, "gru_table": True, **({"candidate_chunk": chunk} if chunk else {}),
            **({"select_kernel": False} if xla_select else {})}
    block = {**topk, "head_kernel": "block"}
    options = {"domino_topk": topk, "domino_block": block,
               "domino_block_stop": {**block, "head_stop": head_stop}}.get(label, {})
    if head_drafts and label in ("domino", "domino_topk", "domino_block", "domino_block_stop"):
        options = {**options, "head_drafts": head_drafts}
    return {**options, "full_block": True} if full_block else options


def add_method_arguments(ap: argparse.ArgumentParser, methods: str) -> None:
    """--model, --methods (default `methods`), --dataset, --dtype, the drafters, --candidates, --candidate-chunk,
    --xla-select, --full-block, --head-drafts, --head-stop, --method-state."""
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--methods", default=methods,
                    help="methods or `jspec bench` labels of the block drafters (domino_topk, domino_block, "
                    "domino_block_stop, domino_headless)")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--eagle3-drafter", help="EAGLE-3 checkpoint of eagle3 / eagle3_pruned / graft")
    ap.add_argument("--dflash-drafter", help="DFlash checkpoint of dflash and graft_tail, or `random`: the training "
                    "recipe's 5-layer drafter with random weights (step costs do not depend on weight values)")
    ap.add_argument("--domino-drafter", help="Domino checkpoint of domino, domino_topk, domino_block, "
                    "domino_block_stop and domino_headless (and of "
                    "graft_tail without --dflash-drafter), or `random`")
    ap.add_argument("--candidates", type=int, default=32, metavar="K",
                    help="correction candidates of domino_topk and domino_block (as `jspec bench --candidates`)")
    ap.add_argument("--candidate-chunk", type=int, default=0, metavar="C",
                    help="approximate candidates of domino_topk and domino_block (`jspec bench --candidate-chunk`)")
    ap.add_argument("--xla-select", action="store_true",
                    help="domino_topk / domino_block: candidates from XLA's sorts instead of the selection kernel")
    ap.add_argument("--full-block", action="store_true",
                    help="block drafters with a shift_label checkpoint also draft its last row (`jspec bench "
                    "--full-block`)")
    ap.add_argument("--head-drafts", type=int, default=0, metavar="M",
                    help="domino / domino_topk / domino_block: only the first M drafts go through the head (`jspec "
                    "bench --head-drafts`; 0: all)")
    ap.add_argument("--head-stop", type=float, default=0.05, metavar="P",
                    help="domino_block_stop: stop the head once its drafts' running candidate confidence falls below "
                    "P (`jspec bench --head-stop`)")
    ap.add_argument("--method-state", action="append", default=[], metavar="METHOD=PATH",
                    help="start METHOD from a saved state (e.g. graft=calibrated.npz from `jspec calibrate`)")


def random_block_drafter(model: LoadedModel, domino: bool):
    """The architecture `jspec train dflash|domino` builds for `model` by default, with random weights."""
    from flax import nnx

    from jspec.drafters.dflash import DFlashDrafter
    from jspec.drafters.domino import DominoDrafter
    from jspec.train.dflash_config import DFlashTrainConfig, drafter_config

    cfg = drafter_config(model.cfg, DFlashTrainConfig(domino=domino))
    return (DominoDrafter if domino else DFlashDrafter)(cfg, dtype=model.dtype, rngs=nnx.Rngs(0))


def _block_method(label: str, args: argparse.Namespace, model: LoadedModel) -> tuple[Method, Any]:
    from jspec.bench.runner import method_of
    from jspec.io.dflash_checkpoint import load_dflash_checkpoint

    spec = (args.dflash_drafter or args.domino_drafter) if label == "graft_tail" else \
        args.dflash_drafter if label == "dflash" else args.domino_drafter
    if not spec:
        raise UserError(f"{label} needs --{'dflash' if label == 'dflash' else 'domino'}-drafter (a checkpoint or "
                        "`random`)")
    domino = label != "dflash" and not (label == "graft_tail" and args.dflash_drafter)
    drafter = (random_block_drafter(model, domino) if spec == "random" else
               load_dflash_checkpoint(spec, model.cfg, model.dtype))
    options = label_options(label, args.candidates, args.full_block, args.candidate_chunk, args.xla_select,
                            args.head_drafts, args.head_stop)
    return dflash_method(method_of(label), model, drafter, **options)


def built_methods(args: argparse.Namespace, model: LoadedModel) -> Iterator[tuple[str, Method, Any, Any]]:
    """(name, method, method params, saved state or None) for each of --methods."""
    saved = dict(spec.split("=", 1) for spec in args.method_state)
    for name in args.methods.split(","):
        if name in BLOCK_LABELS:
            method, params = _block_method(name, args, model)
        else:
            method, params = build(name, model, args.eagle3_drafter if name in EAGLE3_METHODS else None)
        yield name, method, params, method.load_state(saved[name]) if name in saved else None
