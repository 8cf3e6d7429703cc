"""The starting weights of a block drafter: random, copied from the target's last layers, or read from an exported
drafter (all of it, or its backbone)."""

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jspec.config import ModelConfig
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import load_dflash_checkpoint
from jspec.train.dflash_config import DFlashTrainConfig


def fresh_drafter(dcfg: DFlashConfig | DominoConfig, seed: int) -> DFlashDrafter | DominoDrafter:
    cls = DominoDrafter if isinstance(dcfg, DominoConfig) else DFlashDrafter
    return cls(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))


def target_layer_copy(target_cfg: ModelConfig, backbone: DFlashConfig, target_params: dict) -> dict:
    """Backbone weights (pure dict, `fc` and the norms included) that start the draft layers as copies of the
    target's last decoder layers. The layers keep the target's shape, so each copy is exact, except q/k norms when
    the target has none (they stay at 1). `fc` starts by passing the last tap through, and the final norm is the
    target's: the copied layers then read context keys/values close to the ones they were trained on.
    (Copies of the first layers trained worse on CPU: docs/results/2026-12-03-init-layers-smollm2-cpu.md.)"""
    n, num_target = backbone.num_layers, target_cfg.num_layers
    if n > num_target:
        raise UserError(f"--init-layers target: {n} draft layers but the target has only {num_target}")
    if backbone.intermediate_size != target_cfg.intermediate_size:
        raise UserError(f"--init-layers target: --intermediate-size {backbone.intermediate_size} differs from the "
                        f"target's {target_cfg.intermediate_size}")
    first = num_target - n
    layers = {}
    for i in range(n):
        src = target_params["layers"][first + i]
        attn = src["attn"]
        layer = {"input_norm": src["input_norm"], "post_attn_norm": src["post_attn_norm"], "mlp": src["mlp"],
                 "qkv": attn["qkv"], "o": attn["o"]}
        if backbone.attention_bias:
            layer["qkv_bias"] = attn["qkv_bias"]
        for norm in ("q_norm", "k_norm"):
            if attn.get(norm) is not None:
                layer[norm] = attn[norm]
        layers[i] = layer
    d, taps = backbone.hidden_size, len(backbone.tap_layers)
    fc = np.zeros((d, taps * d), np.float32)
    fc[:, (taps - 1) * d:] = np.eye(d, dtype=np.float32)
    return {"fc": fc, "layers": layers, "norm": target_params["norm"],
            "hidden_norm": target_params["layers"][first]["input_norm"]}


def _merge_into(params: dict, update: dict) -> dict:
    """`params` with the leaves of the (partial) `update` in place, as float32 arrays of the same shapes."""
    out = dict(params)
    for key, value in update.items():
        if isinstance(value, dict):
            out[key] = _merge_into(params[key], value)
        else:
            if tuple(np.shape(value)) != tuple(np.shape(params[key])):
                raise AssertionError(f"{key}: {np.shape(value)} vs {np.shape(params[key])}")
            out[key] = jnp.array(value, jnp.float32, copy=True)  # own buffers: the train step donates them
    return out


def init_drafter(target_cfg: ModelConfig, dcfg: DFlashConfig | DominoConfig, cfg: DFlashTrainConfig,
                 target_params: nnx.State | None = None) -> tuple[nnx.GraphDef, dict]:
    """(graphdef, float32 params as a pure dict) of the starting drafter: random, with every weight of
    `cfg.init_from` or the backbone of `cfg.init_backbone` when given (the architecture must match; for the backbone,
    whose `shift_label` `drafter_config` takes from it), or with draft layers copied from the target's
    (`cfg.init_layers`, which needs `target_params`)."""
    drafter = fresh_drafter(dcfg, cfg.seed)
    if cfg.init_layers != "random":
        graphdef, params = nnx.split(drafter)
        params = nnx.to_pure_dict(params)
        backbone = dcfg.backbone if isinstance(dcfg, DominoConfig) else dcfg
        copy = target_layer_copy(target_cfg, backbone, nnx.to_pure_dict(target_params))
        if isinstance(dcfg, DominoConfig):
            return graphdef, {**params, "backbone": _merge_into(params["backbone"], copy)}
        return graphdef, _merge_into(params, copy)
    if cfg.init_from:
        source = load_dflash_checkpoint(cfg.init_from, target_cfg, "float32")
        if isinstance(source, DominoDrafter) != isinstance(drafter, DominoDrafter):
            kinds = {True: "a Domino drafter (with its head)", False: "a DFlash drafter (no head)"}
            raise UserError(f"--init-from {cfg.init_from} holds {kinds[isinstance(source, DominoDrafter)]}; "
                            f"`jspec train {cfg.command}` trains {kinds[isinstance(drafter, DominoDrafter)]}")
        diffs = _config_diffs(source.cfg, drafter.cfg)
        if diffs:
            raise UserError(f"--init-from {cfg.init_from}: its drafter differs from the one to train "
                            f"({'; '.join(diffs)})")
        nnx.update(drafter, nnx.state(source))
    if cfg.init_backbone:
        source = load_dflash_checkpoint(cfg.init_backbone, target_cfg, "float32")
        source = source.backbone if isinstance(source, DominoDrafter) else source
        want = drafter.backbone.cfg if isinstance(drafter, DominoDrafter) else drafter.cfg
        diffs = [f"{f.name} {getattr(source.cfg, f.name)} vs {getattr(want, f.name)}"
                 for f in dataclasses.fields(want) if getattr(source.cfg, f.name) != getattr(want, f.name)]
        if diffs:
            raise UserError(f"--init-backbone {cfg.init_backbone}: its backbone differs from the one to train "
                            f"({'; '.join(diffs)})")
        target = drafter.backbone if isinstance(drafter, DominoDrafter) else drafter
        nnx.update(target, nnx.state(source))
    graphdef, params = nnx.split(drafter)
    return graphdef, nnx.to_pure_dict(params)


def _config_diffs(have, want, prefix: str = "") -> list[str]:
    """`name have vs want` for every field where two (nested) drafter configs differ."""
    diffs = []
    for f in dataclasses.fields(want):
        a, b = getattr(have, f.name), getattr(want, f.name)
        if dataclasses.is_dataclass(b):
            diffs += _config_diffs(a, b, f"{prefix}{f.name}.")
        elif a != b:
            diffs.append(f"{prefix}{f.name} {a} vs {b}")
    return diffs
