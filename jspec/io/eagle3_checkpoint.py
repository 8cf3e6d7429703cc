"""Official EAGLE-3 checkpoints (SafeAILab/EAGLE, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): a directory with an HF
`config.json` (LLaMA-style, `num_hidden_layers: 1`, `draft_vocab_size`, optional `target_hidden_size`) and a
`model.safetensors` holding the state dict of EAGLE's `cnets.Model`:

    fc.weight                                   [H, 3 * target_hidden]
    midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight      [H]
    midlayer.self_attn.{q,k,v}_proj.weight      [heads * hd | kv_heads * hd, 2H]
    midlayer.self_attn.o_proj.weight            [H, heads * hd]
    midlayer.mlp.{gate,up}_proj.weight          [F, H];  midlayer.mlp.down_proj.weight  [H, F]
    norm.weight [H];  lm_head.weight [draft_vocab, H]
    d2t [draft_vocab] int64;  t2d [vocab] bool  (absent when draft_vocab == vocab: EAGLE deletes them then)
    embed_tokens.weight [vocab, H]  (optional; frozen copy of the target's, ignored: the target's own is used)

`save_eagle3_checkpoint` writes the same layout, so drafters trained here load through the same code.
"""

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from flax import nnx

from jspec.config import ModelConfig
from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter, eagle3_tap_layers
from jspec.errors import UserError
from jspec.io.checkpoint_dir import read_config, read_safetensors
from jspec.io.hf_loader import config_from_hf
from jspec.io.weights import numpy_dtype

WEIGHTS_FILE = "model.safetensors"
_OPTIONAL = ("d2t", "t2d", "embed_tokens.weight")
_ROPE_FIELDS = {  # jspec RopeConfig field -> HF rope_scaling key, per scaling kind
    "linear": {"factor": "factor"},
    "llama3": {"factor": "factor", "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor",
               "original_max_position": "original_max_position_embeddings"},
    "yarn": {"factor": "factor", "beta_fast": "beta_fast", "beta_slow": "beta_slow",
             "original_max_position": "original_max_position_embeddings", "attention_factor": "attention_factor"},
}
_FREQ_FACTORS_KEY = "jspec_rope_freq_factors"  # GGUF-style per-pair divisors; HF configs have no field for them


def expected_shapes(cfg: Eagle3Config) -> dict[str, tuple[int, ...]]:
    h, f, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size
    return {
        "fc.weight": (h, 3 * cfg.target_hidden_size),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.mlp.gate_proj.weight": (f, h),
        "midlayer.mlp.up_proj.weight": (f, h),
        "midlayer.mlp.down_proj.weight": (h, f),
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
        "d2t": (cfg.draft_vocab_size,),
        "t2d": (cfg.vocab_size,),
        "embed_tokens.weight": (cfg.vocab_size, h),
    }


def config_from_eagle3_hf(hf: dict, target_cfg: ModelConfig, source: str) -> Eagle3Config:
    """Eagle3Config of a checkpoint's config.json, checked against the target it will draft for."""
    try:
        if int(hf.get("num_hidden_layers", 1)) != 1:
            raise UserError(f"{source}: EAGLE-3 heads have one decoder layer, config.json says "
                            f"{hf['num_hidden_layers']}")
        # The draft layer is LLaMA-style (no biases, no q/k norm) whatever family the target is.
        layer = config_from_hf({**hf, "model_type": "llama"}, source)
        vocab, draft_vocab = int(hf["vocab_size"]), int(hf.get("draft_vocab_size", hf["vocab_size"]))
        target_hidden = int(hf.get("target_hidden_size", layer.hidden_size))
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{source}: config.json lacks or mangles a field EAGLE-3 needs ({e!r})") from None
    rope = layer.rope
    if hf.get(_FREQ_FACTORS_KEY) is not None:
        rope = dataclasses.replace(rope, freq_factors=tuple(float(x) for x in hf[_FREQ_FACTORS_KEY]))
    if vocab != target_cfg.vocab_size:
        raise UserError(f"{source}: vocab mismatch: the EAGLE-3 head was made for {vocab} tokens, the target has "
                        f"{target_cfg.vocab_size}")
    if target_hidden != target_cfg.hidden_size:
        raise UserError(f"{source}: the head fuses target states of width {target_hidden}, the target's are "
                        f"{target_cfg.hidden_size}")
    if layer.hidden_size != target_cfg.hidden_size:
        raise UserError(f"{source}: head width {layer.hidden_size} differs from the target's {target_cfg.hidden_size}; "
                        "such heads carry their own embedding, which jspec does not support")
    return Eagle3Config(
        hidden_size=layer.hidden_size,
        num_heads=layer.num_heads,
        num_kv_heads=layer.num_kv_heads,
        head_dim=layer.head_dim,
        intermediate_size=layer.intermediate_size,
        rms_norm_eps=layer.rms_norm_eps,
        rope=rope,
        target_hidden_size=target_hidden,
        draft_vocab_size=draft_vocab,
        vocab_size=vocab,
        tap_layers=eagle3_tap_layers(target_cfg.num_layers),
    )


def config_to_eagle3_hf(cfg: Eagle3Config) -> dict:
    rope = cfg.rope
    scaling = None
    if rope.scaling != "none":
        scaling = {"rope_type": rope.scaling} | {
            hf_key: getattr(rope, field) for field, hf_key in _ROPE_FIELDS[rope.scaling].items()}
    hf = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": rope.theta,
        "rope_scaling": scaling,
        "tie_word_embeddings": False,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab_size,
    }
    if cfg.target_hidden_size != cfg.hidden_size:
        # Only then: EAGLE's loader takes the key's presence to mean "no target embedding" (cnets.Model.__init__).
        hf["target_hidden_size"] = cfg.target_hidden_size
    if rope.freq_factors is not None:
        hf[_FREQ_FACTORS_KEY] = list(rope.freq_factors)
    return hf


def check_tensors(cfg: Eagle3Config, tensors: Mapping[str, np.ndarray], source: str) -> None:
    expected = expected_shapes(cfg)
    optional = set(_OPTIONAL) if cfg.draft_vocab_size == cfg.vocab_size else {"embed_tokens.weight"}
    missing = sorted(set(expected) - set(tensors) - optional)
    if missing:
        raise UserError(f"{source}: missing {len(missing)} EAGLE-3 tensors, e.g. {missing[:3]}")
    unknown = sorted(set(tensors) - set(expected))
    if unknown:
        raise UserError(f"{source}: tensors that are not part of an EAGLE-3 head, e.g. {unknown[:3]}")
    for name, shape in expected.items():
        if name in tensors and tuple(tensors[name].shape) != shape:
            raise UserError(f"{source}: tensor {name} has shape {tuple(tensors[name].shape)}, expected {shape}")
    if ("d2t" in tensors) != ("t2d" in tensors):
        raise UserError(f"{source}: d2t and t2d come together; found only one of them")
    if "d2t" in tensors:
        _check_vocab_maps(np.asarray(tensors["d2t"]), np.asarray(tensors["t2d"]), source)


def _check_vocab_maps(d2t: np.ndarray, t2d: np.ndarray, source: str) -> None:
    # d2t must name distinct, ascending target ids, and t2d must mark exactly those.
    used = np.arange(d2t.size) + d2t.astype(np.int64)
    if (used.min() < 0 or used.max() >= t2d.size or np.any(np.diff(used) <= 0)
            or t2d.astype(bool).sum() != d2t.size or not t2d.astype(bool)[used].all()):
        raise UserError(f"{source}: d2t / t2d do not describe the same draft vocabulary")


def to_pure_state(cfg: Eagle3Config, tensors: Mapping[str, np.ndarray], dtype: str) -> dict:
    """Nested dict in the layout of `nnx.to_pure_dict(Eagle3Drafter state)`."""
    np_dtype = numpy_dtype(dtype)

    def get(name: str) -> np.ndarray:
        return np.asarray(tensors[name]).astype(np_dtype)

    attn, mlp = "midlayer.self_attn.", "midlayer.mlp."
    if "d2t" in tensors:
        d2t, t2d = np.asarray(tensors["d2t"]).astype(np.int32), np.asarray(tensors["t2d"]).astype(bool)
    else:  # full vocabulary: the identity map
        d2t, t2d = np.zeros(cfg.draft_vocab_size, np.int32), np.ones(cfg.vocab_size, bool)
    return {
        "fc": get("fc.weight"),
        "layer": {
            "input_norm": {"weight": get("midlayer.input_layernorm.weight")},
            "hidden_norm": {"weight": get("midlayer.hidden_norm.weight")},
            "qkv": np.concatenate([get(attn + f"{n}_proj.weight") for n in "qkv"], axis=0),
            "o": get(attn + "o_proj.weight"),
            "post_attn_norm": {"weight": get("midlayer.post_attention_layernorm.weight")},
            "mlp": {"gate_up": np.concatenate([get(mlp + "gate_proj.weight"), get(mlp + "up_proj.weight")], axis=0),
                    "down": get(mlp + "down_proj.weight")},
        },
        "norm": {"weight": get("norm.weight")},
        "lm_head": get("lm_head.weight"),
        "d2t": d2t,
        "t2d": t2d,
    }


def from_pure_state(cfg: Eagle3Config, pure: Mapping) -> dict[str, np.ndarray]:
    """Official tensor names of a drafter's pure state (the inverse of `to_pure_state`)."""
    layer = pure["layer"]
    q, k, v = np.split(np.asarray(layer["qkv"]), [cfg.q_size, cfg.q_size + cfg.kv_size], axis=0)
    gate, up = np.split(np.asarray(layer["mlp"]["gate_up"]), 2, axis=0)
    attn, mlp = "midlayer.self_attn.", "midlayer.mlp."
    return {
        "fc.weight": np.asarray(pure["fc"]),
        "midlayer.input_layernorm.weight": np.asarray(layer["input_norm"]["weight"]),
        "midlayer.hidden_norm.weight": np.asarray(layer["hidden_norm"]["weight"]),
        attn + "q_proj.weight": q,
        attn + "k_proj.weight": k,
        attn + "v_proj.weight": v,
        attn + "o_proj.weight": np.asarray(layer["o"]),
        "midlayer.post_attention_layernorm.weight": np.asarray(layer["post_attn_norm"]["weight"]),
        mlp + "gate_proj.weight": gate,
        mlp + "up_proj.weight": up,
        mlp + "down_proj.weight": np.asarray(layer["mlp"]["down"]),
        "norm.weight": np.asarray(pure["norm"]["weight"]),
        "lm_head.weight": np.asarray(pure["lm_head"]),
        "d2t": np.asarray(pure["d2t"]).astype(np.int64),  # EAGLE's dtype
        "t2d": np.asarray(pure["t2d"]).astype(bool),
    }


def build_drafter(cfg: Eagle3Config, tensors: Mapping[str, np.ndarray], dtype: str, source: str) -> Eagle3Drafter:
    """An Eagle3Drafter holding official-named `tensors` (checked first)."""
    check_tensors(cfg, tensors, source)
    abstract = nnx.eval_shape(lambda: Eagle3Drafter(cfg, dtype=jnp.dtype(numpy_dtype(dtype)), rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, to_pure_state(cfg, tensors, dtype)))
    return nnx.merge(graphdef, state)


def load_eagle3_checkpoint(path: str | os.PathLike, target_cfg: ModelConfig, dtype: str = "float32") -> Eagle3Drafter:
    """The EAGLE-3 head in directory `path`, for a target of config `target_cfg`."""
    path = pathlib.Path(path)
    numpy_dtype(dtype)  # validate early
    cfg = config_from_eagle3_hf(read_config(path, "an EAGLE-3"), target_cfg, str(path))
    return build_drafter(cfg, read_safetensors(path, WEIGHTS_FILE), dtype, str(path / WEIGHTS_FILE))


def save_eagle3_checkpoint(drafter: Eagle3Drafter, path: str | os.PathLike) -> None:
    """Writes `config.json` + `model.safetensors` in the official layout (weights in the drafter's dtype)."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = from_pure_state(drafter.cfg, nnx.to_pure_dict(nnx.state(drafter)))
    tensors = {name: np.ascontiguousarray(x) for name, x in tensors.items()}
    weights_tmp = path / f"{WEIGHTS_FILE}.tmp{os.getpid()}"
    config_tmp = path / f"config.json.tmp{os.getpid()}"
    try:
        safetensors.numpy.save_file(tensors, str(weights_tmp))
        config_tmp.write_text(json.dumps(config_to_eagle3_hf(drafter.cfg), indent=2) + "\n")
        os.replace(weights_tmp, path / WEIGHTS_FILE)
        os.replace(config_tmp, path / "config.json")
    finally:
        weights_tmp.unlink(missing_ok=True)
        config_tmp.unlink(missing_ok=True)
