"""DFlash block drafter (z-lab/dflash `dflash/model.py`) as a Flax NNX module, used functionally like the target.

Context: the target's hidden states at the tap layers are concatenated and projected, `c = hidden_norm(fc(taps))`, and
every draft layer turns `c` into keys/values with its own k/v projections (k_norm and RoPE at the token's position, no
input norm): the "KV injection". Those context K/V are computed once per committed token and kept in the drafter's
KV cache (slot p = position p), as DFlash keeps them in its DynamicCache across rounds.

Block: `[bonus, MASK × (B − 1)]` at positions `start .. start + B − 1`, embedded with the target's (frozen) embedding,
runs through Qwen3-style layers (q/k norm, SwiGLU) whose attention sees every committed context slot and the whole
block (non-causal). The final-normed block states go through the target's frozen LM head. Row k predicts the token at
`start + k` (plain DFlash: drafts from rows 1 .. B − 1), or at `start + k + 1` with `shift_label` (Domino checkpoints:
all B rows draft). Weights keep HF's `[out, in]` layout; q/k/v and gate/up are fused like in `jspec.models.decoder`.
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


def dflash_tap_layers(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """DFlash's `build_target_layer_ids`: one tap per draft layer, spread from layer 1 to layer L − 3 (one draft
    layer: L // 2). DFlash reads HF `hidden_states[l + 1]`, the output of decoder layer l: jspec's tap convention.
    E.g. Qwen3-8B (36 layers) with 5 draft layers: (1, 9, 17, 25, 33)."""
    if num_draft_layers < 1:
        raise UserError(f"a DFlash drafter needs at least one layer, got {num_draft_layers}")
    if num_draft_layers == 1:
        return (num_target_layers // 2,)
    span = num_target_layers - 4
    return tuple(int(round(1 + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers))


@dataclasses.dataclass(frozen=True)
class DFlashConfig(AttentionShape):
    hidden_size: int  # = the target's: the drafter reads the target's embedding and LM head
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeConfig
    vocab_size: int  # the target's
    tap_layers: tuple[int, ...]  # target decoder layers whose outputs `fc` fuses
    mask_token_id: int
    block_size: int = 16
    attention_bias: bool = False  # biases on q/k/v/o (HF `attention_bias`)
    shift_label: bool = False  # row k predicts start + k + 1 (Domino) instead of start + k

    def __post_init__(self):
        self.check_heads()
        if self.block_size < 2:
            raise UserError(f"DFlash block size must be >= 2, got {self.block_size}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise UserError(f"mask token id {self.mask_token_id} is outside the vocabulary of {self.vocab_size}")
        if not self.tap_layers:
            raise UserError("DFlash needs at least one target tap layer")

    @property
    def num_drafts(self) -> int:
        return self.block_size if self.shift_label else self.block_size - 1

    @property
    def first_draft_row(self) -> int:
        """Block row that predicts the first draft."""
        return 0 if self.shift_label else 1

    @property
    def feature_size(self) -> int:
        return len(self.tap_layers) * self.hidden_size

    def check_target(self, target_cfg: ModelConfig, source: str = "DFlash drafter") -> None:
        """The drafter shares the target's embedding, LM head and hidden states: their shapes must agree."""
        if self.vocab_size != target_cfg.vocab_size:
            raise UserError(f"{source}: vocab mismatch: the drafter was made for {self.vocab_size} tokens, the target "
                            f"has {target_cfg.vocab_size}")
        if self.hidden_size != target_cfg.hidden_size:
            raise UserError(f"{source}: drafter width {self.hidden_size} differs from the target's "
                            f"{target_cfg.hidden_size} (DFlash reads the target's embedding and LM head)")
        last = target_cfg.num_layers - 1
        bad = [t for t in self.tap_layers if not 0 <= t < last]
        if bad:
            # HF's hidden_states[L] is the final-normed output, not layer L - 1's: only layers 0 .. L - 2 are taps.
            raise UserError(f"{source}: tap layers {bad} are outside 0..{last - 1} for a {target_cfg.num_layers}-layer "
                            "target")

    @classmethod
    def for_target(cls, target_cfg: ModelConfig, num_layers: int = 1, *, block_size: int = 16,
                   mask_token_id: int | None = None, intermediate_size: int | None = None,
                   shift_label: bool = False) -> "DFlashConfig":
        """The official recipe: the target's layer shape and RoPE, taps by DFlash's rule for `num_layers` layers.

        `mask_token_id` defaults to the last vocabulary id (Qwen3 checkpoints use a reserved id, 151669)."""
        cfg = cls(
            hidden_size=target_cfg.hidden_size,
            num_layers=num_layers,
            num_heads=target_cfg.num_heads,
            num_kv_heads=target_cfg.num_kv_heads,
            head_dim=target_cfg.head_dim,
            intermediate_size=intermediate_size or target_cfg.intermediate_size,
            rms_norm_eps=target_cfg.rms_norm_eps,
            rope=target_cfg.rope,
            vocab_size=target_cfg.vocab_size,
            tap_layers=dflash_tap_layers(target_cfg.num_layers, num_layers),
            mask_token_id=target_cfg.vocab_size - 1 if mask_token_id is None else mask_token_id,
            block_size=block_size,
            shift_label=shift_label,
        )
        cfg.check_target(target_cfg)
        return cfg


def _param(rngs: nnx.Rngs, shape: tuple[int, ...], dtype) -> nnx.Param:
    return nnx.Param((jax.random.normal(rngs.params(), shape, jnp.float32) * 0.02).astype(dtype))


def _bias(size: int, dtype, present: bool) -> nnx.Param | None:
    return nnx.Param(jnp.zeros((size,), dtype)) if present else None


class DFlashLayer(nnx.Module):
    """`Qwen3DFlashDecoderLayer`: Qwen3 layer whose keys/values also cover the injected context."""

    def __init__(self, cfg: DFlashConfig, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        h = cfg.hidden_size
        self.input_norm = RMSNorm(h, cfg.rms_norm_eps, dtype)
        self.qkv = _param(rngs, (cfg.q_size + 2 * cfg.kv_size, h), dtype)
        self.qkv_bias = _bias(cfg.q_size + 2 * cfg.kv_size, dtype, cfg.attention_bias)
        self.o = _param(rngs, (h, cfg.q_size), dtype)
        self.o_bias = _bias(h, dtype, cfg.attention_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype)
        self.post_attn_norm = RMSNorm(h, cfg.rms_norm_eps, dtype)
        self.mlp = MLP(cfg, dtype, rngs)  # reads only hidden_size / intermediate_size

    def _project(self, x, rows: slice):
        out = jnp.einsum("btd,fd->btf", x, self.qkv[...][rows])
        return out if self.qkv_bias is None else out + self.qkv_bias[...][rows]

    def _keys_values(self, kv, cos, sin):
        cfg = self.cfg
        b, t, _ = kv.shape
        k, v = jnp.split(kv, 2, axis=-1)
        k = apply_rope(self.k_norm(k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)), cos, sin)
        return k, v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)

    def context_kv(self, ctx: Float[Array, "B P D"], cos, sin):
        """Keys/values of projected target features (the same k/v weights as the block, no input norm)."""
        return self._keys_values(self._project(ctx, slice(self.cfg.q_size, None)), cos, sin)

    def __call__(self, x, cos, sin, layer: int, cache: KVCache, mask: BlockMask):
        cfg = self.cfg
        b, t, _ = x.shape
        qkv = self._project(self.input_norm(x), slice(None))
        q = self.q_norm(qkv[..., : cfg.q_size].reshape(b, t, cfg.num_heads, cfg.head_dim))
        q = apply_rope(q, cos, sin)
        k, v = self._keys_values(qkv[..., cfg.q_size :], cos, sin)
        k_all = write_new_tokens(cache.k, layer, k, mask)
        v_all = write_new_tokens(cache.v, layer, v, mask)
        out = tree_attention(q, k_all, v_all, mask.start, mask.block, layer=layer, kernel=attention_kernel())
        out = jnp.einsum("btf,df->btd", out.reshape(b, t, cfg.q_size), self.o[...])
        if self.o_bias is not None:
            out = out + self.o_bias[...]
        x = x + out
        x = x + self.mlp(self.post_attn_norm(x))
        return x, KVCache(k=k_all, v=v_all, lengths=cache.lengths)


class DFlashDrafter(nnx.Module):
    def __init__(self, cfg: DFlashConfig, *, dtype=jnp.bfloat16, rngs: nnx.Rngs):
        self.cfg = cfg
        self.fc = _param(rngs, (cfg.hidden_size, cfg.feature_size), dtype)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.layers = nnx.List([DFlashLayer(cfg, dtype, rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        inv_freq, scale = inverse_frequencies(cfg.rope, cfg.head_dim)
        self.inv_freq, self.rope_scale = tuple(inv_freq.tolist()), scale  # static (hashable) attributes

    def _rope(self, positions):
        return rope_tables(positions, jnp.asarray(self.inv_freq, jnp.float32), self.rope_scale)

    def write_context(self, features: Float[Array, "B P F"], positions: Int[Array, "B P"], valid: Bool[Array, "B P"],
                      cache: KVCache) -> KVCache:
        """Writes every layer's context K/V of the target `features` (taps concatenated) at slots `positions`."""
        dtype = self.fc[...].dtype
        ctx = self.hidden_norm(jnp.einsum("bpf,df->bpd", features.astype(dtype), self.fc[...]))
        cos, sin = self._rope(positions)
        rows = jnp.broadcast_to(jnp.arange(features.shape[0])[:, None], positions.shape)
        slots = jnp.where(valid, positions, cache.max_len)  # padding is written nowhere
        k_all, v_all = cache.k, cache.v
        for i, layer in enumerate(self.layers):
            k, v = layer.context_kv(ctx, cos, sin)
            k_all = k_all.at[i, rows, slots].set(k.astype(k_all.dtype), mode="drop")
            v_all = v_all.at[i, rows, slots].set(v.astype(v_all.dtype), mode="drop")
        return KVCache(k=k_all, v=v_all, lengths=cache.lengths)

    def __call__(self, embed_table: Float[Array, "V D"], tokens: Int[Array, "B T"], start: Int[Array, " B"],
                 cache: KVCache) -> tuple[Float[Array, "B T D"], KVCache]:
        """Runs a block at positions `start .. start + T − 1` over the context slots below `start`.

        The block's own K/V are written at slots `start ..` (scratch: the next `write_context` overwrites them).
        Returns the final-normed block states, ready for the target's LM head.
        """
        b, t = tokens.shape
        dtype = self.fc[...].dtype
        positions = start[:, None] + jnp.arange(t, dtype=start.dtype)[None, :]
        mask = BlockMask(start=start, block=jnp.ones((b, t, t), bool))  # non-causal inside the block
        cos, sin = self._rope(positions)
        x = jnp.take(embed_table, tokens, axis=0).astype(dtype)
        for i, layer in enumerate(self.layers):
            x, cache = layer(x, cos, sin, i, cache, mask)
        return self.norm(x), cache

    def init_cache(self, batch: int, max_len: int, dtype=jnp.bfloat16) -> KVCache:
        shape = (self.cfg.num_layers, batch, max_len, self.cfg.num_kv_heads, self.cfg.head_dim)
        return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))
