"""HF-named weight tensors -> the Decoder's NNX state, and a safetensors cache of dequantized weights.

Every loader (GGUF, HF directory) first produces a dict of numpy arrays under HF transformers' names and `[out, in]`
layout; this module is the single place that maps those names onto our fused parameters.
"""

import json
import os
import pathlib
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import safetensors.numpy
from flax import nnx

from jspec.config import ModelConfig
from jspec.errors import UserError
from jspec.models.decoder import Decoder

_NUMPY_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}


def numpy_dtype(dtype: str):
    if dtype not in _NUMPY_DTYPES:
        raise UserError(f"unsupported dtype {dtype!r}; expected one of {sorted(_NUMPY_DTYPES)}")
    return _NUMPY_DTYPES[dtype]


def expected_hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, d), "model.norm.weight": (d,)}
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (cfg.q_size, d),
            p + "self_attn.k_proj.weight": (cfg.kv_size, d),
            p + "self_attn.v_proj.weight": (cfg.kv_size, d),
            p + "self_attn.o_proj.weight": (d, cfg.q_size),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        }
        if cfg.attention_bias:
            shapes |= {p + "self_attn.q_proj.bias": (cfg.q_size,), p + "self_attn.k_proj.bias": (cfg.kv_size,),
                       p + "self_attn.v_proj.bias": (cfg.kv_size,)}
        if cfg.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)}
    return shapes


def check_tensors(cfg: ModelConfig, tensors: Mapping[str, np.ndarray], source: str) -> None:
    expected = expected_hf_shapes(cfg)
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise UserError(f"{source}: missing {len(missing)} weight tensors, e.g. {missing[:3]}")
    unknown = sorted(set(tensors) - set(expected) - {"lm_head.weight"})
    if unknown:
        raise UserError(f"{source}: unsupported weight tensors for a {cfg.family} model, e.g. {unknown[:3]}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise UserError(f"{source}: tensor {name} has shape {tuple(tensors[name].shape)}, expected {shape}")


def to_pure_state(cfg: ModelConfig, tensors: Mapping[str, np.ndarray], dtype: str) -> dict:
    """Nested dict in the layout of `nnx.to_pure_dict(Decoder state)`, as numpy arrays of `dtype`."""
    np_dtype = numpy_dtype(dtype)

    def get(name: str) -> np.ndarray:
        return np.asarray(tensors[name]).astype(np_dtype, copy=False)

    def layer(i: int) -> dict:
        p = f"model.layers.{i}."
        attn = {
            "qkv": np.concatenate([get(p + f"self_attn.{n}_proj.weight") for n in "qkv"], axis=0),
            "o": get(p + "self_attn.o_proj.weight"),
        }
        if cfg.attention_bias:
            attn["qkv_bias"] = np.concatenate([get(p + f"self_attn.{n}_proj.bias") for n in "qkv"], axis=0)
        if cfg.qk_norm:
            attn["q_norm"] = {"weight": get(p + "self_attn.q_norm.weight")}
            attn["k_norm"] = {"weight": get(p + "self_attn.k_norm.weight")}
        return {
            "input_norm": {"weight": get(p + "input_layernorm.weight")},
            "attn": attn,
            "post_attn_norm": {"weight": get(p + "post_attention_layernorm.weight")},
            "mlp": {
                "gate_up": np.concatenate([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], axis=0),
                "down": get(p + "mlp.down_proj.weight"),
            },
        }

    state = {
        "embed": get("model.embed_tokens.weight"),
        "layers": {i: layer(i) for i in range(cfg.num_layers)},
        "norm": {"weight": get("model.norm.weight")},
    }
    if not cfg.tie_embeddings:
        state["lm_head"] = get("lm_head.weight")
    return state


def build_params(cfg: ModelConfig, tensors: Mapping[str, np.ndarray], dtype: str, source: str):
    """(graphdef, params) for a Decoder holding `tensors`, placed on the default device."""
    check_tensors(cfg, tensors, source)
    abstract = nnx.eval_shape(lambda: Decoder(cfg, dtype=jnp.dtype(numpy_dtype(dtype)), rngs=nnx.Rngs(0)))
    graphdef, abstract_state = nnx.split(abstract)
    pure = jax.tree.map(jnp.asarray, to_pure_state(cfg, tensors, dtype))
    nnx.replace_by_pure_dict(abstract_state, pure)
    return graphdef, abstract_state


def save_cache(path: pathlib.Path, cfg_dict: dict, tensors: Mapping[str, np.ndarray], dtype: str, key: str) -> None:
    """Atomically write dequantized weights + the config they belong to (key = identity of the source file)."""
    np_dtype = numpy_dtype(dtype)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        arrays = {k: np.ascontiguousarray(np.asarray(v).astype(np_dtype, copy=False)) for k, v in tensors.items()}
        safetensors.numpy.save_file(arrays, str(tmp), metadata={"jspec_key": key, "config": json.dumps(cfg_dict)})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_cache(path: pathlib.Path, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
    """The cached (config dict, tensors) if `path` exists and was made from the same source; else None."""
    if not path.exists():
        return None
    try:
        with safetensors.safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("jspec_key") != key:
                return None
            return json.loads(meta["config"]), {name: f.get_tensor(name) for name in f.keys()}
    except Exception:  # a damaged cache is rebuilt from the source, never trusted
        path.unlink(missing_ok=True)
        return None
