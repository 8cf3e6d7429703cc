"""jspec.io.domino_head: a frozen-backbone Domino checkpoint split into its DFlash backbone and its head, and joined
again bit for bit; mismatched pieces are refused by name."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jspec.config import ModelConfig, RopeConfig
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io import domino_head
from jspec.io.checkpoint_dir import read_safetensors
from jspec.io.dflash_checkpoint import load_dflash_checkpoint, save_dflash_checkpoint

TARGET = ModelConfig(family="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=8, num_heads=4,
                     num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, rope=RopeConfig(theta=10000.0), qk_norm=True)
BACKBONE = DFlashConfig.for_target(TARGET, num_layers=2, block_size=5, mask_token_id=90)


def _save_domino(path, shift_label=False, dtype=jnp.bfloat16, seed=0):
    cfg = DominoConfig(dataclasses.replace(BACKBONE, shift_label=shift_label), gru_hidden=16, rank=8, prefix_len=1)
    save_dflash_checkpoint(DominoDrafter(cfg, dtype=dtype, rngs=nnx.Rngs(seed)), path, TARGET.num_layers)
    return path


@pytest.mark.parametrize("shift_label", [False, True])
def test_backbone_head_and_join_round_trip(tmp_path, shift_label):
    domino = _save_domino(tmp_path / "domino", shift_label)
    domino_head.backbone(domino, tmp_path / "dflash")
    dflash = load_dflash_checkpoint(tmp_path / "dflash", TARGET)
    assert type(dflash) is DFlashDrafter and dflash.cfg.shift_label == shift_label
    whole, backbone = read_safetensors(domino), read_safetensors(tmp_path / "dflash")
    assert set(whole) - set(backbone) == {"prefix_gru.weight_ih_l0", "prefix_gru.weight_hh_l0",
                                          "embed_proj.0.weight", "embed_proj.2.weight"}
    for name, x in backbone.items():
        assert x.dtype == whole[name].dtype and np.array_equal(x, whole[name]), name

    domino_head.head(domino, tmp_path / "dflash", tmp_path / "head")
    assert set(read_safetensors(tmp_path / "head", "head.safetensors")) == set(whole) - set(backbone)
    domino_head.join(tmp_path / "dflash", tmp_path / "head", tmp_path / "joined")
    assert (tmp_path / "joined" / "model.safetensors").read_bytes() == (domino / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "joined" / "config.json").read_text()) == json.loads(
        (domino / "config.json").read_text())
    assert isinstance(load_dflash_checkpoint(tmp_path / "joined", TARGET), DominoDrafter)


def test_mismatched_pieces_are_refused(tmp_path):
    domino = _save_domino(tmp_path / "domino")
    other = DFlashDrafter(BACKBONE, dtype=jnp.bfloat16, rngs=nnx.Rngs(7))  # same shapes, other weights
    save_dflash_checkpoint(other, tmp_path / "other", TARGET.num_layers)
    with pytest.raises(UserError, match="backbone differs"):
        domino_head.head(domino, tmp_path / "other", tmp_path / "head")
    with pytest.raises(UserError, match="not a Domino checkpoint"):
        domino_head.backbone(tmp_path / "other", tmp_path / "out")
    with pytest.raises(UserError, match="not a DFlash checkpoint"):
        domino_head.head(domino, domino, tmp_path / "head")

    domino_head.backbone(domino, tmp_path / "dflash")
    domino_head.head(domino, tmp_path / "dflash", tmp_path / "head")
    wider = DFlashDrafter(dataclasses.replace(BACKBONE, block_size=6), dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    save_dflash_checkpoint(wider, tmp_path / "wider", TARGET.num_layers)
    with pytest.raises(UserError, match="config differs"):
        domino_head.join(tmp_path / "wider", tmp_path / "head", tmp_path / "joined")
    with pytest.raises(UserError, match="no head.safetensors"):
        domino_head.join(tmp_path / "dflash", tmp_path / "dflash", tmp_path / "joined")
    assert not (tmp_path / "joined").exists()


def test_a_head_joins_a_continued_backbone(tmp_path):
    """TRANSFER_HEAD (bench/h200_domino_relations.sh): a head moved onto its DFlash drafter trained further, which has
    the same config and other weights, keeps its own tensors and takes every backbone tensor from the new drafter."""
    domino = _save_domino(tmp_path / "domino")
    domino_head.backbone(domino, tmp_path / "dflash")
    domino_head.head(domino, tmp_path / "dflash", tmp_path / "head")
    continued = DFlashDrafter(BACKBONE, dtype=jnp.bfloat16, rngs=nnx.Rngs(7))  # same config, other weights
    save_dflash_checkpoint(continued, tmp_path / "continued", TARGET.num_layers)
    domino_head.join(tmp_path / "continued", tmp_path / "head", tmp_path / "moved")
    moved, backbone = read_safetensors(tmp_path / "moved"), read_safetensors(tmp_path / "continued")
    head = read_safetensors(tmp_path / "head", "head.safetensors")
    assert set(moved) == set(backbone) | set(head)
    for name, x in (backbone | head).items():
        assert np.array_equal(moved[name], x), name
    assert not all(np.array_equal(moved[k], read_safetensors(domino)[k]) for k in backbone)
    assert isinstance(load_dflash_checkpoint(tmp_path / "moved", TARGET), DominoDrafter)
