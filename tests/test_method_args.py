"""bench/method_args.py: the block drafters' bench labels resolve to the right method and options, `random`
drafters have the training recipe's architecture, and a missing drafter is a clear error."""

import argparse
import dataclasses
import pathlib
import sys

import jax.numpy as jnp
import pytest
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.method_args import add_method_arguments, built_methods  # noqa: E402
from jspec.config import ModelConfig, RopeConfig  # noqa: E402
from jspec.errors import UserError  # noqa: E402
from jspec.methods.dflash import DFlash, Domino  # noqa: E402
from jspec.methods.graft_tail import GraftTail  # noqa: E402
from jspec.models.decoder import Decoder  # noqa: E402
from jspec.models.loading import LoadedModel  # noqa: E402

TARGET = ModelConfig(family="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=8, num_heads=4,
                     num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, rope=RopeConfig(theta=10000.0), qk_norm=True)


@pytest.fixture(scope="module")
def target():
    graphdef, params = nnx.split(Decoder(TARGET, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    return LoadedModel(name="tiny", cfg=TARGET, graphdef=graphdef, params=params, tokenizer=None, dtype="float32",
                       chat=False)


def parse(*argv):
    ap = argparse.ArgumentParser()
    add_method_arguments(ap, "vanilla")
    return ap.parse_args(list(argv))


def test_block_labels_with_random_drafters(target):
    args = parse("--methods", "dflash,domino_topk,domino_block,domino_headless,graft_tail", "--dflash-drafter",
                 "random",
                 "--domino-drafter", "random")
    built = {name: (method, params) for name, method, params, _ in built_methods(args, target)}
    dflash, _ = built["dflash"]
    assert type(dflash) is DFlash and len(dflash.taps) == 5  # the recipe's 5 layers, one tap each
    topk, topk_params = built["domino_topk"]
    assert isinstance(topk, Domino) and topk.candidates == 32 and "gru_table" in topk_params
    assert "head" in topk_params["drafter"] and topk.head_kernel is None
    block, block_params = built["domino_block"]
    assert isinstance(block, Domino) and block.head_kernel == "block" and block.candidates == 32
    assert "gru_table" in block_params
    headless, headless_params = built["domino_headless"]
    assert type(headless) is DFlash and "head" not in headless_params["drafter"]  # the Domino backbone alone
    tail, _ = built["graft_tail"]
    assert isinstance(tail, GraftTail) and not tail.head  # --dflash-drafter wins for graft_tail
    assert block.tree_size == headless.tree_size == dflash.tree_size  # the B-long chain by default
    args = parse("--methods", "domino_block", "--domino-drafter", "random", "--candidates", "16", "--full-block")
    (_, block, _, _), = built_methods(args, target)
    chunked = parse("--methods", "domino_topk", "--domino-drafter", "random", "--candidate-chunk", "128",
                    "--xla-select")
    (_, topk, _, _), = built_methods(chunked, target)
    assert topk.candidate_chunk == 128 and topk.candidates == 32 and not topk.select_kernel
    assert block.head_drafts == 0 and topk.head_drafts == 0  # the whole block through the head by default
    short = parse("--methods", "domino_block,domino_headless", "--domino-drafter", "random", "--head-drafts", "6")
    built = {name: method for name, method, _, _ in built_methods(short, target)}
    assert built["domino_block"].head_drafts == 6 and not hasattr(built["domino_headless"], "head_drafts")
    assert block.candidates == 16 and block.head_kernel == "block" and block.full_block and block.candidate_chunk == 0
    assert block.tree_size == dflash.tree_size + 1  # the official B + 1 chain


def test_domino_block_stop_is_domino_block_with_a_head_stop(target):
    from bench.method_args import label_options
    from jspec.bench.runner import method_of

    assert method_of("domino_block_stop") == "domino"
    assert label_options("domino_block_stop", 16) == {**label_options("domino_block", 16), "head_stop": 0.05}
    assert "head_stop" not in label_options("domino_block", 16)
    assert label_options("domino_block_stop", 16, head_drafts=4, head_stop=0.2)["head_stop"] == 0.2
    args = parse("--methods", "domino_block,domino_block_stop", "--domino-drafter", "random", "--head-stop", "0.2")
    built = {name: method for name, method, _, _ in built_methods(args, target)}
    stop, block = built["domino_block_stop"], built["domino_block"]
    assert isinstance(stop, Domino) and stop.head_stop == 0.2 and block.head_stop == 0.0
    assert dataclasses.replace(stop, head_stop=0.0) == block  # otherwise domino_block's options
    (_, default, _, _), = built_methods(parse("--methods", "domino_block_stop", "--domino-drafter", "random"), target)
    assert default.head_stop == 0.05
    with pytest.raises(UserError, match="head_stop must be in"):
        list(built_methods(parse("--methods", "domino_block_stop", "--domino-drafter", "random", "--head-stop", "1"),
                           target))


def test_missing_drafter_names_the_flag(target):
    with pytest.raises(UserError, match="--domino-drafter"):
        list(built_methods(parse("--methods", "domino"), target))


def test_head_kernel_needs_the_candidate_loop(target):
    from bench.method_args import random_block_drafter
    from jspec.methods import dflash_method

    drafter = random_block_drafter(target, domino=True)
    with pytest.raises(UserError, match="candidates"):
        dflash_method("domino", target, drafter, head_kernel="block")
    with pytest.raises(UserError, match="candidates > 0"):
        dflash_method("domino", target, drafter, candidate_chunk=8)
    with pytest.raises(UserError, match="head_kernel"):
        dflash_method("domino", target, drafter, candidates=8, gru_table=True, head_kernel="fast")
