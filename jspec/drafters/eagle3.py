"""EAGLE-3 draft head (SafeAILab/EAGLE `eagle/model/cnets.py`) as a Flax NNX module, used functionally like the target.

One decoder layer whose attention reads `concat(input_layernorm(embed(token)), hidden_norm(g))`, where `g` is either
`fc(concat of three target hidden states)` (first draft step) or the head's own previous output (later steps), then
the usual post-attention RMSNorm + SwiGLU MLP, a final `norm` and an LM head over a reduced draft vocabulary mapped back
to target ids by `d2t`. The token embedding is the target's (frozen, never copied here). Weights keep HF's `[out, in]`
layout; q/k/v and gate/up are fused like in `jspec.models.decoder`.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from jspec.config import AttentionShape, ModelConfig, RopeConfig
from jspec.errors import UserError
from jspec.models.cache import BlockMask, KVCache, write_new_tokens
from jspec.models.decoder import MLP, RMSNorm, attention_kernel
from jspec.models.rope import apply_rope, inverse_frequencies, rope_tables
from pallas_kernels.tree_attention.api import tree_attention


def eagle3_tap_layers(num_layers: int) -> tuple[int, int, int]:
    """The target layers whose outputs EAGLE-3 fuses, in jspec's convention (`Decoder(..., taps=...)`: outputs).

    EAGLE's `modeling_llama_kv.py` / `modeling_qwen3_kv.py` append `hidden_states` at the top of the layer loop when
    `idx in {2, L // 2, L - 3}`, i.e. the state ENTERING HF layer idx = the output of layer idx - 1; `ea_model.py`
    concatenates them in that (ascending) order. E.g. L = 32 (LLaMA-3.1-8B): entering 2, 16, 29 = outputs 1, 15, 28.
    """
    taps = (1, num_layers // 2 - 1, num_layers - 4)
    if not taps[0] < taps[1] < taps[2]:
        raise UserError(f"EAGLE-3 needs a target of at least 7 layers (three distinct taps), got {num_layers}")
    return taps


@dataclasses.dataclass(frozen=True)
class Eagle3Config(AttentionShape):
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeConfig
    target_hidden_size: int  # width of each tapped target state; fc takes three of them
    draft_vocab_size: int
    vocab_size: int  # the target's
    tap_layers: tuple[int, ...]

    def __post_init__(self):
        self.check_heads()
        if not 0 < self.draft_vocab_size <= self.vocab_size:
            raise UserError(f"draft vocab size {self.draft_vocab_size} must be in 1..{self.vocab_size}")

    @classmethod
    def for_target(cls, target_cfg: ModelConfig, draft_vocab_size: int) -> "Eagle3Config":
        """The official recipe: the target's layer shape and RoPE, taps at EAGLE-3's three depths."""
        return cls(
            hidden_size=target_cfg.hidden_size,
            num_heads=target_cfg.num_heads,
            num_kv_heads=target_cfg.num_kv_heads,
            head_dim=target_cfg.head_dim,
            intermediate_size=target_cfg.intermediate_size,
            rms_norm_eps=target_cfg.rms_norm_eps,
            rope=target_cfg.rope,
            target_hidden_size=target_cfg.hidden_size,
            draft_vocab_size=draft_vocab_size,
            vocab_size=target_cfg.vocab_size,
            tap_layers=eagle3_tap_layers(target_cfg.num_layers),
        )


class Buffer(nnx.Variable):
    """Non-trainable state (the vocabulary maps): kept out of `nnx.Param` so optimizers skip it."""


def _param(rngs: nnx.Rngs, shape: tuple[int, ...], dtype) -> nnx.Param:
    return nnx.Param((jax.random.normal(rngs.params(), shape, jnp.float32) * 0.02).astype(dtype))


class Eagle3Layer(nnx.Module):
    """EAGLE's `midlayer` (`LlamaDecoderLayeremb`): attention over [normed embedding | normed hidden], 2H wide."""

    def __init__(self, cfg: Eagle3Config, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        h = cfg.hidden_size
        self.input_norm = RMSNorm(h, cfg.rms_norm_eps, dtype)  # on the token embedding
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps, dtype)  # on the fused / fed-back hidden state
        self.qkv = _param(rngs, (cfg.q_size + 2 * cfg.kv_size, 2 * h), dtype)
        self.o = _param(rngs, (h, cfg.q_size), dtype)
        self.post_attn_norm = RMSNorm(h, cfg.rms_norm_eps, dtype)
        self.mlp = MLP(cfg, dtype, rngs)  # reads only hidden_size / intermediate_size

    def __call__(self, emb, x, cos, sin, cache: KVCache, mask: BlockMask):
        cfg = self.cfg
        b, t, _ = x.shape
        qkv = jnp.einsum("btd,fd->btf", jnp.concatenate([self.input_norm(emb), self.hidden_norm(x)], -1), self.qkv[...])
        q, k, v = jnp.split(qkv, [cfg.q_size, cfg.q_size + cfg.kv_size], axis=-1)
        q = apply_rope(q.reshape(b, t, cfg.num_heads, cfg.head_dim), cos, sin)
        k = apply_rope(k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim), cos, sin)
        v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        k_all = write_new_tokens(cache.k, 0, k, mask)
        v_all = write_new_tokens(cache.v, 0, v, mask)
        # Tree drafting uses windows wider than the new tokens, which only the reference takes; square masks follow
        # the target's kernel policy.
        out = tree_attention(q, k_all[0].astype(q.dtype), v_all[0].astype(q.dtype), mask.start, mask.block,
                             kernel=attention_kernel() if mask.is_square else "reference")
        x = x + jnp.einsum("btf,df->btd", out.reshape(b, t, cfg.q_size), self.o[...])  # residual: un-normed hidden
        x = x + self.mlp(self.post_attn_norm(x))
        return x, KVCache(k=k_all, v=v_all, lengths=cache.lengths)


class Eagle3Drafter(nnx.Module):
    def __init__(self, cfg: Eagle3Config, *, dtype=jnp.bfloat16, rngs: nnx.Rngs):
        self.cfg = cfg
        self.fc = _param(rngs, (cfg.hidden_size, 3 * cfg.target_hidden_size), dtype)
        self.layer = Eagle3Layer(cfg, dtype, rngs)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.lm_head = _param(rngs, (cfg.draft_vocab_size, cfg.hidden_size), dtype)
        # Identity maps until a draft vocabulary is built or loaded: draft id i is target id i.
        self.d2t = Buffer(jnp.zeros((cfg.draft_vocab_size,), jnp.int32))
        self.t2d = Buffer(jnp.arange(cfg.vocab_size) < cfg.draft_vocab_size)
        inv_freq, scale = inverse_frequencies(cfg.rope, cfg.head_dim)
        self.inv_freq, self.rope_scale = tuple(inv_freq.tolist()), scale  # static (hashable) attributes

    def __call__(
        self,
        embed_table: Float[Array, "V H"],
        tokens: Int[Array, "B T"],
        features: Float[Array, "B T F"],
        positions: Int[Array, "B T"],
        cache: KVCache,
        mask: BlockMask,
    ) -> tuple[Float[Array, "B T H"], Float[Array, "B T Vd"], KVCache]:
        """Runs T tokens; K/V go to `mask.write_slots` of the one-layer `cache`.

        `features`: three concatenated target taps (F = 3 * target_hidden_size, fused by `fc`) or the head's own
        `hidden_out` from the previous draft step (F = hidden_size). Returns the pre-norm `hidden_out` (what the next
        step feeds back), float32 draft-vocabulary logits and the updated cache.
        """
        cfg = self.cfg
        dtype = self.fc[...].dtype
        if features.shape[-1] == 3 * cfg.target_hidden_size:
            x = jnp.einsum("btf,df->btd", features.astype(dtype), self.fc[...])
        elif features.shape[-1] == cfg.hidden_size:
            x = features.astype(dtype)
        else:
            raise ValueError(f"features of width {features.shape[-1]}: expected {3 * cfg.target_hidden_size} "
                             f"(target taps) or {cfg.hidden_size} (draft hidden)")
        emb = jnp.take(embed_table, tokens, axis=0).astype(dtype)
        cos, sin = rope_tables(positions, jnp.asarray(self.inv_freq, jnp.float32), self.rope_scale)
        x, cache = self.layer(emb, x, cos, sin, cache, mask)
        logits = jnp.einsum("btd,vd->btv", self.norm(x), self.lm_head[...]).astype(jnp.float32)
        return x, logits, cache

    def set_vocab_maps(self, d2t: Int[Array, " Vd"], t2d: Bool[Array, " V"]) -> None:
        """Installs a draft vocabulary (`jspec.drafters.draft_vocab`)."""
        if d2t.shape != (self.cfg.draft_vocab_size,) or t2d.shape != (self.cfg.vocab_size,):
            raise ValueError(f"d2t {d2t.shape} / t2d {t2d.shape}: expected ({self.cfg.draft_vocab_size},) / "
                             f"({self.cfg.vocab_size},)")
        self.d2t[...] = jnp.asarray(d2t, jnp.int32)
        self.t2d[...] = jnp.asarray(t2d, bool)

    def draft_to_target(self, ids: Int[Array, "*S"]) -> Int[Array, "*S"]:
        """Target token ids of draft-vocabulary ids (EAGLE: `id + d2t[id]`)."""
        return ids + self.d2t[...][ids]

    def init_cache(self, batch: int, max_len: int, dtype=jnp.bfloat16) -> KVCache:
        shape = (1, batch, max_len, self.cfg.num_kv_heads, self.cfg.head_dim)
        return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))
