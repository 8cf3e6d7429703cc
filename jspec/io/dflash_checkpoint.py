"""Official DFlash and Domino checkpoints (z-lab/Qwen3-8B-DFlash-b16, Huang2020/Qwen3-8B-Domino-b16, SpecForge output):
a directory with an HF `config.json` (Qwen3-style layer fields plus `block_size`, `num_target_layers` and a
`dflash_config` object) and `*.safetensors` holding the state dict of `DFlashDraftModel`:

    layers.{i}.input_layernorm.weight, layers.{i}.post_attention_layernorm.weight     [H]
    layers.{i}.self_attn.{q,k,v}_proj.weight        [heads * hd | kv_heads * hd, H]   (+ .bias if attention_bias)
    layers.{i}.self_attn.o_proj.weight              [H, heads * hd]                   (+ .bias if attention_bias)
    layers.{i}.self_attn.{q,k}_norm.weight          [hd]
    layers.{i}.mlp.{gate,up}_proj.weight [F, H];    layers.{i}.mlp.down_proj.weight [H, F]
    fc.weight [H, n_taps * H];  hidden_norm.weight [H];  norm.weight [H]
Domino (`dflash_config.projector_type == "domino"`) adds the head:
    prefix_gru.weight_ih_l0 [3G, H];  prefix_gru.weight_hh_l0 [3G, G]
    embed_proj.0.weight [R, H + G];   embed_proj.2.weight [V, R]

`dflash_config` fields: `mask_token_id` (required), `target_layer_ids` (default: DFlash's rule), and for Domino
`gru_hidden_dim`, `emb_dim` (the rank R), `pure_draft_prefix_len` (default 0) and `shift_label` (default false).
There is no embedding or LM head: the target's are used. `save_dflash_checkpoint` writes the same layout.
"""

import dataclasses
import os
import pathlib
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jspec.config import ModelConfig
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter, dflash_tap_layers
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io.eagle3_checkpoint import _FREQ_FACTORS_KEY, _ROPE_FIELDS
from jspec.io.checkpoint_dir import read_config, read_safetensors, write_checkpoint_dir
from jspec.io.hf_loader import config_from_hf
from jspec.io.weights import numpy_dtype

WEIGHTS_FILE = "model.safetensors"
DOMINO = "domino"


def expected_shapes(cfg: DFlashConfig | DominoConfig) -> dict[str, tuple[int, ...]]:
    dflash = cfg.backbone if isinstance(cfg, DominoConfig) else cfg
    h, f, q, kv, hd = dflash.hidden_size, dflash.intermediate_size, dflash.q_size, dflash.kv_size, dflash.head_dim
    shapes = {"fc.weight": (h, dflash.feature_size), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(dflash.num_layers):
        p = f"layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (f, h),
            p + "mlp.up_proj.weight": (f, h),
            p + "mlp.down_proj.weight": (h, f),
        }
        if dflash.attention_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                       p + "self_attn.v_proj.bias": (kv,), p + "self_attn.o_proj.bias": (h,)}
    if isinstance(cfg, DominoConfig):
        g, r = cfg.gru_hidden, cfg.rank
        shapes |= {"prefix_gru.weight_ih_l0": (3 * g, h), "prefix_gru.weight_hh_l0": (3 * g, g),
                   "embed_proj.0.weight": (r, h + g), "embed_proj.2.weight": (dflash.vocab_size, r)}
    return shapes


def config_from_dflash_hf(hf: dict, target_cfg: ModelConfig, source: str) -> DFlashConfig | DominoConfig:
    """The drafter's config (a DominoConfig when `projector_type` is "domino"), checked against the target."""
    try:
        # The draft layers are Qwen3 layers (q/k norm) whatever family the target is.
        layer = config_from_hf({**hf, "model_type": "qwen3"}, source)
        extra = hf.get("dflash_config") or {}
        if not isinstance(extra, dict):
            raise TypeError("dflash_config is not an object")
        if extra.get("mask_token_id") is None:
            raise UserError(f"{source}: config.json has no dflash_config.mask_token_id (the block's mask token)")
        mask_token_id = int(extra["mask_token_id"])
        block_size = int(hf.get("block_size", 16))
        num_target_layers = int(hf.get("num_target_layers", target_cfg.num_layers))
        taps = extra.get("target_layer_ids")
        taps = (tuple(int(t) for t in taps) if taps is not None
                else dflash_tap_layers(num_target_layers, layer.num_layers))
        projector = extra.get("projector_type")
        shift_label = bool(extra.get("shift_label", False))
        layer_types = hf.get("layer_types") or []
        if projector == DOMINO:
            head = (int(extra["gru_hidden_dim"]), int(extra["emb_dim"]), int(extra.get("pure_draft_prefix_len", 0)))
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{source}: config.json lacks or mangles a field DFlash needs ({e!r})") from None
    rope = layer.rope
    if hf.get(_FREQ_FACTORS_KEY) is not None:
        rope = dataclasses.replace(rope, freq_factors=tuple(float(x) for x in hf[_FREQ_FACTORS_KEY]))
    if projector not in (None, DOMINO):
        raise UserError(f"{source}: unsupported dflash_config.projector_type {projector!r} (jspec runs DFlash and "
                        "Domino drafters)")
    if any(t != "full_attention" for t in layer_types):
        raise UserError(f"{source}: sliding-window draft layers ({layer_types}) are not supported")
    if num_target_layers != target_cfg.num_layers:
        raise UserError(f"{source}: the drafter was made for a {num_target_layers}-layer target, this target has "
                        f"{target_cfg.num_layers} layers")
    cfg = DFlashConfig(
        hidden_size=layer.hidden_size,
        num_layers=layer.num_layers,
        num_heads=layer.num_heads,
        num_kv_heads=layer.num_kv_heads,
        head_dim=layer.head_dim,
        intermediate_size=layer.intermediate_size,
        rms_norm_eps=layer.rms_norm_eps,
        rope=rope,
        vocab_size=layer.vocab_size,
        tap_layers=taps,
        mask_token_id=mask_token_id,
        block_size=block_size,
        attention_bias=layer.attention_bias,
        shift_label=shift_label,
    )
    cfg.check_target(target_cfg, source)
    if projector == DOMINO:
        gru_hidden, rank, prefix_len = head
        return DominoConfig(backbone=cfg, gru_hidden=gru_hidden, rank=rank, prefix_len=prefix_len)
    return cfg


def config_to_dflash_hf(cfg: DFlashConfig | DominoConfig, num_target_layers: int) -> dict:
    dflash = cfg.backbone if isinstance(cfg, DominoConfig) else cfg
    rope = dflash.rope
    scaling = None
    if rope.scaling != "none":
        scaling = {"rope_type": rope.scaling} | {
            hf_key: getattr(rope, field) for field, hf_key in _ROPE_FIELDS[rope.scaling].items()}
    extra = {"mask_token_id": dflash.mask_token_id, "target_layer_ids": list(dflash.tap_layers)}
    if isinstance(cfg, DominoConfig):
        extra |= {"projector_type": DOMINO, "gru_hidden_dim": cfg.gru_hidden, "emb_dim": cfg.rank,
                  "pure_draft_prefix_len": cfg.prefix_len, "shift_label": dflash.shift_label}
    hf = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "num_hidden_layers": dflash.num_layers,
        "hidden_act": "silu",
        "hidden_size": dflash.hidden_size,
        "intermediate_size": dflash.intermediate_size,
        "num_attention_heads": dflash.num_heads,
        "num_key_value_heads": dflash.num_kv_heads,
        "head_dim": dflash.head_dim,
        "rms_norm_eps": dflash.rms_norm_eps,
        "rope_theta": rope.theta,
        "rope_scaling": scaling,
        "attention_bias": dflash.attention_bias,
        "tie_word_embeddings": False,
        "vocab_size": dflash.vocab_size,
        "block_size": dflash.block_size,
        "num_target_layers": num_target_layers,
        "layer_types": ["full_attention"] * dflash.num_layers,
        "dflash_config": extra,
    }
    if rope.freq_factors is not None:
        hf[_FREQ_FACTORS_KEY] = list(rope.freq_factors)
    return hf


def check_tensors(cfg: DFlashConfig | DominoConfig, tensors: Mapping[str, np.ndarray], source: str) -> None:
    expected = expected_shapes(cfg)
    missing = sorted(set(expected) - set(tensors))
    if missing:
        kind = "Domino" if isinstance(cfg, DominoConfig) else "DFlash"
        raise UserError(f"{source}: missing {len(missing)} {kind} tensors, e.g. {missing[:3]}")
    unknown = sorted(set(tensors) - set(expected))
    if unknown:
        raise UserError(f"{source}: tensors that are not part of this drafter, e.g. {unknown[:3]}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise UserError(f"{source}: tensor {name} has shape {tuple(tensors[name].shape)}, expected {shape}")


def _backbone_pure(cfg: DFlashConfig, get) -> dict:
    layers = {}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        attn, mlp = p + "self_attn.", p + "mlp."
        layer = {
            "input_norm": {"weight": get(p + "input_layernorm.weight")},
            "qkv": np.concatenate([get(attn + f"{n}_proj.weight") for n in "qkv"], axis=0),
            "o": get(attn + "o_proj.weight"),
            "q_norm": {"weight": get(attn + "q_norm.weight")},
            "k_norm": {"weight": get(attn + "k_norm.weight")},
            "post_attn_norm": {"weight": get(p + "post_attention_layernorm.weight")},
            "mlp": {"gate_up": np.concatenate([get(mlp + "gate_proj.weight"), get(mlp + "up_proj.weight")], axis=0),
                    "down": get(mlp + "down_proj.weight")},
        }
        if cfg.attention_bias:
            layer["qkv_bias"] = np.concatenate([get(attn + f"{n}_proj.bias") for n in "qkv"], axis=0)
            layer["o_bias"] = get(attn + "o_proj.bias")
        layers[i] = layer
    return {"fc": get("fc.weight"), "hidden_norm": {"weight": get("hidden_norm.weight")}, "layers": layers,
            "norm": {"weight": get("norm.weight")}}


def to_pure_state(cfg: DFlashConfig | DominoConfig, tensors: Mapping[str, np.ndarray], dtype: str) -> dict:
    """Nested dict in the layout of `nnx.to_pure_dict(drafter state)`."""
    np_dtype = numpy_dtype(dtype)

    def get(name: str) -> np.ndarray:
        return np.asarray(tensors[name]).astype(np_dtype)

    if isinstance(cfg, DFlashConfig):
        return _backbone_pure(cfg, get)
    return {"backbone": _backbone_pure(cfg.backbone, get),
            "head": {"w_ih": get("prefix_gru.weight_ih_l0"), "w_hh": get("prefix_gru.weight_hh_l0"),
                     "w1": get("embed_proj.0.weight"), "w2": get("embed_proj.2.weight")}}


def from_pure_state(cfg: DFlashConfig | DominoConfig, pure: Mapping) -> dict[str, np.ndarray]:
    """Official tensor names of a drafter's pure state (the inverse of `to_pure_state`)."""
    dflash = cfg.backbone if isinstance(cfg, DominoConfig) else cfg
    backbone = pure["backbone"] if isinstance(cfg, DominoConfig) else pure
    out = {"fc.weight": backbone["fc"], "hidden_norm.weight": backbone["hidden_norm"]["weight"],
           "norm.weight": backbone["norm"]["weight"]}
    for i in range(dflash.num_layers):
        layer = backbone["layers"][i]
        p = f"layers.{i}."
        q, k, v = np.split(np.asarray(layer["qkv"]), [dflash.q_size, dflash.q_size + dflash.kv_size], axis=0)
        gate, up = np.split(np.asarray(layer["mlp"]["gate_up"]), 2, axis=0)
        out |= {p + "input_layernorm.weight": layer["input_norm"]["weight"], p + "self_attn.q_proj.weight": q,
                p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
                p + "self_attn.o_proj.weight": layer["o"], p + "self_attn.q_norm.weight": layer["q_norm"]["weight"],
                p + "self_attn.k_norm.weight": layer["k_norm"]["weight"],
                p + "post_attention_layernorm.weight": layer["post_attn_norm"]["weight"],
                p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                p + "mlp.down_proj.weight": layer["mlp"]["down"]}
        if dflash.attention_bias:
            qb, kb, vb = np.split(np.asarray(layer["qkv_bias"]), [dflash.q_size, dflash.q_size + dflash.kv_size])
            out |= {p + "self_attn.q_proj.bias": qb, p + "self_attn.k_proj.bias": kb,
                    p + "self_attn.v_proj.bias": vb, p + "self_attn.o_proj.bias": layer["o_bias"]}
    if isinstance(cfg, DominoConfig):
        head = pure["head"]
        out |= {"prefix_gru.weight_ih_l0": head["w_ih"], "prefix_gru.weight_hh_l0": head["w_hh"],
                "embed_proj.0.weight": head["w1"], "embed_proj.2.weight": head["w2"]}
    return {name: np.asarray(x) for name, x in out.items()}


def build_drafter(cfg: DFlashConfig | DominoConfig, tensors: Mapping[str, np.ndarray], dtype: str,
                  source: str) -> DFlashDrafter | DominoDrafter:
    """A drafter holding official-named `tensors` (checked first)."""
    check_tensors(cfg, tensors, source)
    cls = DominoDrafter if isinstance(cfg, DominoConfig) else DFlashDrafter
    abstract = nnx.eval_shape(lambda: cls(cfg, dtype=jnp.dtype(numpy_dtype(dtype)), rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, to_pure_state(cfg, tensors, dtype)))
    return nnx.merge(graphdef, state)


def read_dflash_config(path: str | os.PathLike, target_cfg: ModelConfig) -> DFlashConfig | DominoConfig:
    """The config of the DFlash/Domino checkpoint in directory `path`, without reading its weights."""
    return config_from_dflash_hf(read_config(pathlib.Path(path), "a DFlash/Domino"), target_cfg, str(path))


def load_dflash_checkpoint(path: str | os.PathLike, target_cfg: ModelConfig, dtype: str = "float32"
                           ) -> DFlashDrafter | DominoDrafter:
    """The DFlash drafter (or Domino drafter, by its config) in directory `path`, for a target of `target_cfg`."""
    path = pathlib.Path(path)
    numpy_dtype(dtype)  # validate early
    cfg = read_dflash_config(path, target_cfg)
    return build_drafter(cfg, read_safetensors(path), dtype, str(path))


def save_dflash_checkpoint(drafter: DFlashDrafter | DominoDrafter, path: str | os.PathLike,
                           num_target_layers: int) -> None:
    """Writes `config.json` + `model.safetensors` in the official layout (weights in the drafter's dtype)."""
    tensors = from_pure_state(drafter.cfg, nnx.to_pure_dict(nnx.state(drafter)))
    write_checkpoint_dir(pathlib.Path(path), config_to_dflash_hf(drafter.cfg, num_target_layers), tensors, WEIGHTS_FILE)
