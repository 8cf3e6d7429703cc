"""HF checkpoint directories (config.json + *.safetensors + tokenizer.json) for llama / qwen2 / qwen3."""

import json
import pathlib

import numpy as np
import safetensors

from jspec.config import ModelConfig, RopeConfig
from jspec.errors import UserError

_MODEL_TYPES = ("llama", "qwen2", "qwen3")


def _rope_from_hf(hf: dict) -> RopeConfig:
    # transformers >= 5 nests everything under `rope_parameters`; older configs use rope_theta + rope_scaling.
    params = dict(hf.get("rope_parameters") or {})
    scaling = dict(hf.get("rope_scaling") or {})
    merged = {**scaling, **params}
    theta = float(merged.get("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind in ("default", None):
        return RopeConfig(theta=theta)
    if kind not in ("linear", "llama3", "yarn"):
        raise UserError(f"unsupported rope_type {kind!r} in config.json")
    return RopeConfig(
        theta=theta,
        scaling=kind,
        factor=float(merged.get("factor", 1.0)),
        low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
        high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
        original_max_position=int(merged.get("original_max_position_embeddings",
                                             hf.get("max_position_embeddings", 8192))),
        beta_fast=float(merged.get("beta_fast", 32.0)),
        beta_slow=float(merged.get("beta_slow", 1.0)),
        attention_factor=merged.get("attention_factor"),
    )


def config_from_hf(hf: dict, source: str) -> ModelConfig:
    model_type = hf.get("model_type")
    if model_type not in _MODEL_TYPES:
        raise UserError(f"{source}: unsupported model_type {model_type!r}; supported: {_MODEL_TYPES}")
    heads = int(hf["num_attention_heads"])
    eos = hf.get("eos_token_id")
    eos = () if eos is None else tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]))
    return ModelConfig(
        family=model_type,
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope=_rope_from_hf(hf),
        max_position=int(hf.get("max_position_embeddings", 4096)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=True if model_type == "qwen2" else bool(hf.get("attention_bias", False)),
        qk_norm=model_type == "qwen3",
        bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=eos,
    )


def load_hf_dir(path: pathlib.Path) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    config_path = path / "config.json"
    if not config_path.exists():
        raise UserError(f"{path}: not an HF checkpoint directory (no config.json)")
    try:
        hf = json.loads(config_path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{config_path}: invalid JSON ({e})") from None
    cfg = config_from_hf(hf, str(path))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UserError(f"{path}: no *.safetensors weight files")
    tensors = {}
    for file in files:
        try:
            with safetensors.safe_open(str(file), framework="numpy") as f:
                for name in f.keys():
                    tensors[name] = _to_float32(f.get_tensor(name))
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"{file}: corrupt safetensors file ({e})") from None
    if cfg.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    return cfg, tensors


def _to_float32(x: np.ndarray) -> np.ndarray:
    return x if x.dtype == np.float32 else x.astype(np.float32)
