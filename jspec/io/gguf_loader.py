"""GGUF -> (ModelConfig, HF-named float32 tensors), with gguf-py dequantization of every quant type.

llama.cpp's converter permutes the q/k rows of `llama`-arch models for interleaved RoPE; we undo that here so the
decoder uses HF's half-split RoPE for every family.
"""

import concurrent.futures
import dataclasses
import pathlib

import gguf
import numpy as np
from tqdm import tqdm

from jspec.config import ModelConfig, RopeConfig
from jspec.errors import UserError

_ARCH_FAMILY = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}


def open_gguf(path: str | pathlib.Path) -> gguf.GGUFReader:
    try:
        return gguf.GGUFReader(str(path))
    except FileNotFoundError:
        raise UserError(f"GGUF file not found: {path}") from None
    except Exception as e:  # gguf-py raises ValueError/struct errors on truncated or foreign files
        raise UserError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None


def field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def config_from_gguf(reader: gguf.GGUFReader, source: str) -> ModelConfig:
    arch = field(reader, "general.architecture")
    if arch not in _ARCH_FAMILY:
        raise UserError(f"{source}: unsupported GGUF architecture {arch!r}; supported: {sorted(_ARCH_FAMILY)}")
    a = lambda key, default=None: field(reader, f"{arch}.{key}", default)  # noqa: E731
    hidden, heads = int(a("embedding_length")), int(a("attention.head_count"))
    tensor_names = {t.name for t in reader.tensors}
    rope = RopeConfig(theta=float(a("rope.freq_base", 10000.0)))
    scaling = a("rope.scaling.type")
    if scaling in ("linear", "yarn"):
        rope = dataclasses.replace(rope, scaling=scaling, factor=float(a("rope.scaling.factor")),
                                   original_max_position=int(a("rope.scaling.original_context_length", 0) or 0))
    if "rope_freqs.weight" in tensor_names:
        factors = next(t for t in reader.tensors if t.name == "rope_freqs.weight")
        rope = dataclasses.replace(rope, freq_factors=tuple(float(x) for x in np.asarray(factors.data).ravel()))
    eos = field(reader, "tokenizer.ggml.eos_token_id")
    bos = field(reader, "tokenizer.ggml.bos_token_id")
    vocab = a("vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)
    return ModelConfig(
        family=_ARCH_FAMILY[arch],
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(a("feed_forward_length")),
        num_layers=int(a("block_count")),
        num_heads=heads,
        num_kv_heads=int(a("attention.head_count_kv", heads)),
        head_dim=int(a("attention.key_length", hidden // heads)),
        # GGUF stores eps as float32 (1e-5 -> 9.99999975e-06); round back to the value HF configs carry.
        rms_norm_eps=float(f"{float(a('attention.layer_norm_rms_epsilon')):.6g}"),
        rope=rope,
        max_position=int(a("context_length", 4096)),
        tie_embeddings="output.weight" not in tensor_names,
        attention_bias="blk.0.attn_q.bias" in tensor_names,
        qk_norm="blk.0.attn_q_norm.weight" in tensor_names,
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=() if eos is None else (int(eos),),
    )


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    if gguf_name.startswith("blk."):
        _, layer, rest = gguf_name.split(".", 2)
        if rest in _LAYER_NAMES:
            return f"model.layers.{layer}.{_LAYER_NAMES[rest]}"
    return None  # e.g. rope_freqs.weight, folded into the config


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k row permutation (interleaved pairs -> half-split halves per head)."""
    shape = w.shape
    return w.reshape(n_heads, shape[0] // n_heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def load_gguf_tensors(reader: gguf.GGUFReader, cfg: ModelConfig, progress: bool = True) -> dict[str, np.ndarray]:
    """Dequantize every tensor to float32 under HF names (threads: gguf-py's numpy kernels release the GIL)."""
    jobs = [(t, _hf_name(t.name)) for t in reader.tensors]
    jobs = [(t, name) for t, name in jobs if name is not None]

    def convert(job):
        t, name = job
        try:
            w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except Exception as e:
            raise UserError(f"cannot dequantize {t.name} ({t.tensor_type.name}): {e}") from None
        w = w.reshape(tuple(int(x) for x in reversed(t.shape)))  # GGUF lists ne0 (the fastest axis) first
        if cfg.family == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            w = _unpermute(w, cfg.num_heads if "q_proj" in name else cfg.num_kv_heads)
        return name, w

    out = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = pool.map(convert, jobs)
        for name, w in tqdm(results, total=len(jobs), desc="dequantizing", unit="tensor", disable=not progress):
            out[name] = w
    return out
