"""Domino drafter: a DFlash backbone plus Domino's causal correction head (jianuo-huang/Domino `code/dflash.py`,
SpecForge `specforge/modeling/draft/domino.py`), as Flax NNX modules used functionally.

Head: a bias-free one-layer GRU (`prefix_gru`, hidden G, PyTorch gate order r, z, n) reads the target's embeddings of
the block tokens chosen so far; `embed_proj = Linear(H + G → R) → SiLU → Linear(R → V)` maps `[z_i ; h_i]` (backbone
state of draft row i, GRU state) to full-vocabulary delta logits added to the base logits `lm_head(z_i)`. Draft rows
below `prefix_len` (`pure_draft_prefix_len`) keep their base logits. Drafting is sequential over the block: the GRU
starts at zero, reads the bonus token, then after each draft reads that draft before correcting the next row.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.errors import UserError
from jspec.models.precision import einsum_f32
from pallas_kernels.domino_step import domino_draft, domino_draft_candidates, gru_step
from pallas_kernels.domino_step.reference import Choose


@dataclasses.dataclass(frozen=True)
class DominoConfig:
    backbone: DFlashConfig
    gru_hidden: int = 1024  # `gru_hidden_dim`
    rank: int = 256  # `emb_dim`: width of the low-rank correction
    prefix_len: int = 1  # `pure_draft_prefix_len`: leading drafts without correction

    def __post_init__(self):
        if self.gru_hidden < 1 or self.rank < 1:
            raise UserError(f"Domino GRU width {self.gru_hidden} and rank {self.rank} must be positive")
        if not 0 <= self.prefix_len <= self.backbone.num_drafts:
            raise UserError(f"Domino prefix length {self.prefix_len} must be in 0..{self.backbone.num_drafts}")


def _param(rngs: nnx.Rngs, shape: tuple[int, ...], dtype) -> nnx.Param:
    return nnx.Param((jax.random.normal(rngs.params(), shape, jnp.float32) * 0.02).astype(dtype))


class DominoHead(nnx.Module):
    def __init__(self, cfg: DominoConfig, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        h, g, r, v = cfg.backbone.hidden_size, cfg.gru_hidden, cfg.rank, cfg.backbone.vocab_size
        self.w_ih = _param(rngs, (3 * g, h), dtype)  # prefix_gru.weight_ih_l0
        self.w_hh = _param(rngs, (3 * g, g), dtype)  # prefix_gru.weight_hh_l0
        self.w1 = _param(rngs, (r, h + g), dtype)  # embed_proj.0.weight, input [z ; h]
        self.w2 = _param(rngs, (v, r), dtype)  # embed_proj.2.weight

    @property
    def w_z(self) -> Float[Array, "R H"]:
        return self.w1[...][:, : self.cfg.backbone.hidden_size]

    @property
    def w_s(self) -> Float[Array, "R G"]:
        return self.w1[...][:, self.cfg.backbone.hidden_size :]

    def z_part(self, hidden: Float[Array, "B N H"]) -> Float[Array, "B N R"]:
        """`W_z · z_i` for every draft row at once (the parallel half of the first projection)."""
        w_z = self.w_z
        return einsum_f32("bnh,rh->bnr", hidden.astype(w_z.dtype), w_z)

    def input_table(self, embed: Float[Array, "V H"]) -> Float[Array, "V G3"]:
        """E · W_ihᵀ: the GRU input gates of every token, in the weight dtype (what `draft(table=...)` gathers)."""
        w_ih = self.w_ih[...]
        return jnp.einsum("vh,gh->vg", embed.astype(w_ih.dtype), w_ih,
                          preferred_element_type=jnp.float32).astype(w_ih.dtype)

    def draft(self, embed: Float[Array, "V H"], hidden: Float[Array, "B N H"], base: Float[Array, "B N V"],
              bonus: Int[Array, " B"], choose: Choose | None = None, platform: str | None = None,
              candidates: int = 0, table: Float[Array, "V G3"] | None = None,
              fused: str | None = None, candidate_chunk: int = 0, select_kernel: bool = True,
              head_drafts: int = 0, head_stop: float = 0.0) -> Int[Array, "B N"]:
        """The N drafts after `bonus`, given the backbone states and base logits of the N draft rows.

        `choose=None` is greedy through the fused correction kernel of `platform`; otherwise `choose(logits, i)` picks
        draft i from its full corrected logits (sampled drafting). `candidates` = k > 0 corrects only each row's k
        highest base logits and drafts among them (`domino_draft_candidates`, an XLA loop). `table` (`input_table`)
        replaces the per-step W_ih GEMV by a row gather. `fused` ("step" / "block") runs that greedy candidate loop
        as GPU kernels (`domino_draft_candidates`). `candidate_chunk` > 0 takes approximate candidates: the best token
        of each of the k chunks of that many tokens with the highest maxima (`chunk_max_top_k`). The GPU kernel
        paths select candidates with a sort-free kernel unless `select_kernel` is False. `head_drafts` = M > 0: only
        drafts 0 .. M − 1 go through the head (the GRU runs M − 1 steps); later rows take their base logits' choice,
        as the uncorrected prefix does. Drafts past M are rarely accepted from a drafter whose acceptance is short, and
        the head's sequential part costs per draft. `head_stop` = P > 0 (greedy, with candidates) stops the head
        adaptively instead: once the running product of the drafts' probabilities among their candidates falls
        below P, later drafts take the base argmax (`reference.stopping_candidate_loop`).
        """
        if head_stop and not (candidates and choose is None):
            raise ValueError("head_stop needs greedy drafting among candidates (candidates > 0): the confidence is "
                             "a softmax over each row's candidates")
        n = base.shape[1]
        if 0 < head_drafts < n:
            rest = (jnp.argmax(base[:, head_drafts:], axis=-1).astype(jnp.int32) if choose is None else
                    jnp.stack([choose(base[:, i].astype(jnp.float32), i) for i in range(head_drafts, n)], axis=1))
            first = self.draft(embed, hidden[:, :head_drafts], base[:, :head_drafts], bonus, choose, platform,
                               candidates, table, fused, candidate_chunk, select_kernel, head_stop=head_stop)
            return jnp.concatenate([first, rest], axis=1)
        args = (base, self.z_part(hidden), bonus, embed, self.w_ih[...], self.w_hh[...], self.w_s, self.w2[...])
        if candidates:
            return domino_draft_candidates(*args, prefix_len=self.cfg.prefix_len, candidates=candidates,
                                           choose=choose, table=table, platform=platform, fused=fused,
                                           chunk=candidate_chunk, select_kernel=select_kernel, stop=head_stop)
        return domino_draft(*args, prefix_len=self.cfg.prefix_len, choose=choose, platform=platform, table=table)

    def teacher_forced_pre(self, embed: Float[Array, "V H"], hidden: Float[Array, "B N H"],
                           prev: Int[Array, "B N"]) -> Float[Array, "B N R"]:
        """`W_z · z_i + W_s · h_i` (float32) of every draft row when row i's GRU state has read `prev[:, :i + 1]`
        (bonus, then the given earlier tokens). The input gates of all tokens are one GEMM; only W_hh is sequential."""
        w_ih, w_hh, w_s = self.w_ih[...], self.w_hh[...], self.w_s
        gates = einsum_f32("bnh,gh->nbg", jnp.take(embed, prev, axis=0).astype(w_ih.dtype), w_ih)

        def step(h, gi):
            h = gru_step(gi, h, w_hh)
            return h, h

        _, states = jax.lax.scan(step, jnp.zeros((prev.shape[0], self.cfg.gru_hidden), jnp.float32), gates)
        return self.z_part(hidden) + einsum_f32("nbg,rg->bnr", states.astype(w_s.dtype), w_s)

    def corrected(self, base: Float[Array, "B N V"], pre: Float[Array, "B N R"]) -> Float[Array, "B N V"]:
        """`base + W2 · SiLU(pre)` in float32; rows below `prefix_len` keep `base`."""
        w2 = self.w2[...]
        delta = einsum_f32("bnr,vr->bnv", jax.nn.silu(pre).astype(w2.dtype), w2)
        rows = jnp.arange(pre.shape[1])[None, :, None] >= self.cfg.prefix_len
        return base.astype(jnp.float32) + jnp.where(rows, delta, 0.0)

    def teacher_forced_logits(self, embed: Float[Array, "V H"], hidden: Float[Array, "B N H"],
                              base: Float[Array, "B N V"], prev: Int[Array, "B N"]) -> Float[Array, "B N V"]:
        """Corrected logits of every draft row under teacher forcing (`teacher_forced_pre`): SpecForge's training
        forward, and the logits greedy drafting takes argmaxes of."""
        return self.corrected(base, self.teacher_forced_pre(embed, hidden, prev))


class DominoDrafter(nnx.Module):
    """The DFlash backbone (trained with `shift_label` in the released checkpoints) and the correction head."""

    def __init__(self, cfg: DominoConfig, *, dtype=jnp.bfloat16, rngs: nnx.Rngs):
        self.cfg = cfg
        self.backbone = DFlashDrafter(cfg.backbone, dtype=dtype, rngs=rngs)
        self.head = DominoHead(cfg, dtype, rngs)
