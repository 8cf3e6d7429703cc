"""One decoder for the llama, qwen2 and qwen3 families as Flax NNX modules, used functionally.

Weights keep HF's `[out, in]` layout so checkpoints load without transposes; q/k/v and gate/up are fused into one
matmul each. The forward takes an explicit cache and a `BlockMask` (committed prefix + a mask among the new tokens), so
prefill, single-token decode and tree verification are the same call with different masks.
"""

import dataclasses
import os

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jspec.config import ModelConfig
from jspec.models.cache import BlockMask, KVCache, write_new_tokens
from jspec.models.rope import apply_rope, inverse_frequencies, rope_tables
from pallas_kernels.tree_attention.api import tree_attention


def attention_kernel() -> str | None:
    # JSPEC_ATTENTION decides when set. Otherwise: the GPU kernel on GPUs, where it measured faster inside the decode
    # loop (docs/results/2026-11-29-tree-engine-h200.md); the XLA reference elsewhere, the TPU kernel included until
    # it has been measured on a TPU.
    if os.environ.get("JSPEC_ATTENTION"):
        return None
    return "gpu" if jax.default_backend() == "gpu" else "reference"

def _param(rngs: nnx.Rngs, shape: tuple[int, ...], dtype, std: float = 0.02) -> nnx.Param:
    return nnx.Param((jax.random.normal(rngs.params(), shape, jnp.float32) * std).astype(dtype))


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, dtype):
        self.weight = nnx.Param(jnp.ones((dim,), dtype))
        self.eps = eps

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return self.weight[...] * xf.astype(x.dtype)  # same rounding order as HF


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        d = cfg.hidden_size
        self.qkv = _param(rngs, (cfg.q_size + 2 * cfg.kv_size, d), dtype)
        self.qkv_bias = nnx.Param(jnp.zeros((cfg.q_size + 2 * cfg.kv_size,), dtype)) if cfg.attention_bias else None
        self.o = _param(rngs, (d, cfg.q_size), dtype)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype) if cfg.qk_norm else None

    def __call__(self, x, cos, sin, layer, k_all, v_all, mask: BlockMask):
        cfg = self.cfg
        b, t, _ = x.shape
        qkv = jnp.einsum("btd,fd->btf", x, self.qkv[...])
        if self.qkv_bias is not None:
            qkv = qkv + self.qkv_bias[...]
        q, k, v = jnp.split(qkv, [cfg.q_size, cfg.q_size + cfg.kv_size], axis=-1)
        q = q.reshape(b, t, cfg.num_heads, cfg.head_dim)
        k = k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Straight into the [L, B, S, K, D] cache so that XLA updates the donated buffer in place.
        k_all = write_new_tokens(k_all, layer, k, mask)
        v_all = write_new_tokens(v_all, layer, v, mask)
        out = tree_attention(q, k_all, v_all, mask.start, mask.block, layer=layer,
                             kernel=attention_kernel() if mask.is_square else "reference")
        return jnp.einsum("btf,df->btd", out.reshape(b, t, cfg.q_size), self.o[...]), k_all, v_all


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, dtype, rngs: nnx.Rngs):
        self.gate_up = _param(rngs, (2 * cfg.intermediate_size, cfg.hidden_size), dtype)
        self.down = _param(rngs, (cfg.hidden_size, cfg.intermediate_size), dtype)

    def __call__(self, x: Float[Array, "B T D"]) -> Float[Array, "B T D"]:
        gate, up = jnp.split(jnp.einsum("btd,fd->btf", x, self.gate_up[...]), 2, axis=-1)
        return jnp.einsum("btf,df->btd", jax.nn.silu(gate) * up, self.down[...])


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, dtype, rngs: nnx.Rngs):
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.attn = Attention(cfg, dtype, rngs)
        self.post_attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = MLP(cfg, dtype, rngs)

    def __call__(self, x, cos, sin, layer, k_all, v_all, mask):
        h, k_all, v_all = self.attn(self.input_norm(x), cos, sin, layer, k_all, v_all, mask)
        x = x + h
        return x + self.mlp(self.post_attn_norm(x)), k_all, v_all


class Decoder(nnx.Module):
    """Target decoder. `__call__` returns final-normed hidden states; `logits` applies the LM head."""

    def __init__(self, cfg: ModelConfig, *, dtype=jnp.bfloat16, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = _param(rngs, (cfg.vocab_size, cfg.hidden_size), dtype)
        self.layers = nnx.List([DecoderLayer(cfg, dtype, rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.lm_head = None if cfg.tie_embeddings else _param(rngs, (cfg.vocab_size, cfg.hidden_size), dtype)
        inv_freq, scale = inverse_frequencies(cfg.rope, cfg.head_dim)
        self.inv_freq, self.rope_scale = tuple(inv_freq.tolist()), scale  # static (hashable) attributes

    def __call__(
        self,
        tokens: Int[Array, "B T"],
        positions: Int[Array, "B T"],
        cache: KVCache,
        mask: BlockMask,
        taps: tuple[int, ...] = (),
    ) -> tuple[Float[Array, "B T D"], KVCache, tuple[Float[Array, "B T D"], ...]]:
        """Runs the new tokens, writing their K/V at cache slots `mask.start + j` (padding is not written).

        `taps`: indices of decoder layers whose output hidden states are returned (EAGLE-3 / DFlash features).
        """
        if any(not 0 <= i < self.cfg.num_layers for i in taps):
            raise ValueError(f"tap layers {taps} out of range for {self.cfg.num_layers} layers")
        x = jnp.take(self.embed[...], tokens, axis=0)
        cos, sin = rope_tables(positions, jnp.asarray(self.inv_freq, jnp.float32), self.rope_scale)
        k_all, v_all = cache.k, cache.v
        mask = cache.fits(mask)
        tapped = {}
        for i, layer in enumerate(self.layers):
            x, k_all, v_all = layer(x, cos, sin, i, k_all, v_all, mask)
            if i in taps:
                tapped[i] = x
        return self.norm(x), dataclasses.replace(cache, k=k_all, v=v_all), tuple(tapped[i] for i in taps)

    def logits(self, hidden: Float[Array, "... D"]) -> Float[Array, "... V"]:
        head = self.embed if self.lm_head is None else self.lm_head
        return jnp.einsum("...d,vd->...v", hidden, head[...], preferred_element_type=jnp.float32)
