"""`dflash` and `domino`: a block drafter proposes one chain per step, verified by the shared acceptance rule.

Each step the drafter runs the block `[root, MASK × (B − 1)]` at the root's position against its cache of committed
context (projected target features, one slot per committed position) and drafts `num_drafts` = B − 1 tokens, so the
verify chain is B long (the paper's 16-token budget). `shift_label` checkpoints (Domino's released ones) predict one
more token, from the block's last row; `full_block=True` drafts it too, for the B + 1 chain of the official
`spec_generate`. That row is off by default: on an H200 the 17-row verify costs 74 µs more than the 16-row one (a GEMM
shape step), about 3% of a step, and in 8,779 bench steps of an 800-step Domino drafter no acceptance went past 13
tokens (docs/results/2026-12-02-session16-h200.md). `domino` corrects the drafts sequentially with its GRU head.

Context bookkeeping (like eagle3's pending pairs): the root has no target feature until it is verified, so after a
verification the accepted path's features (root first) are pending in the method state; the next propose writes them
at the next context slots before running its block. After prefill the prompt's features are written directly.

Drafts are greedy by default (DFlash's rule); `draft_temperature > 0` samples them (Domino's rule at T > 0). Either
way the output is lossless: the emitted tokens are always the target's own choices (jspec.verify).
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from jspec.errors import UserError
from jspec.methods.base import Context, Method
from jspec.models.cache import KVCache
from jspec.sampling import Sampling, select
from jspec.tree import chain


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DFlashState:
    cache: KVCache  # drafter K/V: context of position p at slot p, the block's scratch after the context
    fed: jax.Array  # [B] committed positions whose context K/V are in the cache
    pend_feat: jax.Array  # [B, P, F] target features of the last accepted path, not yet written
    pend_n: jax.Array  # [B]
    rng: jax.Array  # draws of sampled drafting


@dataclasses.dataclass(frozen=True)
class DFlash(Method):
    name: str = "dflash"
    drafter: nnx.GraphDef | None = None  # a DFlashDrafter (dflash) or a DominoDrafter (domino)
    taps: tuple[int, ...] = ()
    block_size: int = 16
    shift_label: bool = False
    mask_token_id: int = 0
    draft_temperature: float = 0.0
    full_block: bool = False  # shift_label checkpoints: also draft the block's last row (a B + 1 verify chain)

    @property
    def num_drafts(self) -> int:
        return self.block_size if self.shift_label and self.full_block else self.block_size - 1

    @property
    def tree_size(self) -> int:
        return 1 + self.num_drafts

    @property
    def max_depth(self) -> int:
        return self.num_drafts

    @property
    def target_taps(self) -> tuple[int, ...]:
        return self.taps

    def _backbone(self, model):
        return model

    def init_state(self, params, batch: int, max_cache_len: int) -> DFlashState:
        backbone = self._backbone(nnx.merge(self.drafter, params["drafter"]))
        dtype = params["embed"].dtype
        width = backbone.cfg.feature_size
        # The block's scratch slots lie right after the committed context, up to block_size past the target cache;
        # a multiple of 128 slots suits the attention kernels' blocks.
        slots = -(-(max_cache_len + self.block_size) // 128) * 128
        return DFlashState(cache=backbone.init_cache(batch, slots, dtype),
                           fed=jnp.zeros((batch,), jnp.int32),
                           pend_feat=jnp.zeros((batch, self.max_depth + 1, width), dtype),
                           pend_n=jnp.zeros((batch,), jnp.int32), rng=jax.random.key(0))

    def resume_state(self, params, state: DFlashState, batch: int, max_cache_len: int) -> DFlashState:
        return self.init_state(params, batch, max_cache_len)  # every part belongs to the previous sequences

    def prefill(self, params, state: DFlashState, tokens, prompt_lens, first_token, features) -> DFlashState:
        backbone = self._backbone(nnx.merge(self.drafter, params["drafter"]))
        b, t = tokens.shape
        positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        cache = backbone.write_context(features, positions, positions < prompt_lens[:, None], state.cache)
        return dataclasses.replace(state, cache=cache, fed=prompt_lens, pend_n=jnp.zeros_like(prompt_lens))

    def propose(self, params, state: DFlashState, ctx: Context):
        drafts, _, _, state = self.draft_block(params, state, ctx)
        tokens = jnp.concatenate([ctx.root[:, None], drafts], axis=1)
        return chain(tokens, jnp.ones(tokens.shape, bool)), state

    def draft_block(self, params, state: DFlashState, ctx: Context):
        """(drafts [B, num_drafts], the draft rows' final-normed states, their base logits, state): the pending
        context is written, then the block runs at the root's position."""
        model = nnx.merge(self.drafter, params["drafter"])
        backbone = self._backbone(model)
        b, p = state.pend_feat.shape[:2]
        slots = state.fed[:, None] + jnp.arange(p, dtype=jnp.int32)[None, :]
        cache = backbone.write_context(state.pend_feat, slots, jnp.arange(p)[None, :] < state.pend_n[:, None],
                                       state.cache)
        fed = state.fed + state.pend_n  # = ctx.lengths: the root sits right after the committed context
        block = jnp.concatenate([ctx.root[:, None], jnp.full((b, self.block_size - 1), self.mask_token_id,
                                                             jnp.int32)], axis=1)
        hidden, cache = backbone(params["embed"], block, fed, cache)
        first = backbone.cfg.first_draft_row
        rows = hidden[:, first : first + self.num_drafts]
        base = jnp.einsum("bnd,vd->bnv", rows, params["lm_head"]).astype(jnp.float32)
        key, rng = jax.random.split(state.rng)
        drafts = self._draft(model, params, rows, base, ctx.root, key)
        return drafts, rows, base, dataclasses.replace(state, cache=cache, fed=fed,
                                                      pend_n=jnp.zeros_like(state.pend_n), rng=rng)

    def _choose(self, key):
        """None (greedy) or a sampler of draft i from its logits."""
        if self.draft_temperature == 0.0:
            return None
        sampling = Sampling(temperature=self.draft_temperature)
        return lambda logits, i: select(logits, sampling, jax.random.fold_in(key, i))

    def _draft(self, model, params, rows, base, root, key):
        choose = self._choose(key)
        if choose is None:
            return jnp.argmax(base, axis=-1).astype(jnp.int32)
        return jnp.stack([choose(base[:, i], i) for i in range(base.shape[1])], axis=1)

    def observe(self, params, state: DFlashState, tree, logits, acceptance, features) -> DFlashState:
        pend_feat = jnp.take_along_axis(features, acceptance.path[:, :, None], axis=1).astype(state.pend_feat.dtype)
        return dataclasses.replace(state, pend_feat=pend_feat, pend_n=acceptance.path_len)


@dataclasses.dataclass(frozen=True)
class Domino(DFlash):
    name: str = "domino"
    shift_label: bool = True
    kernel: str | None = None  # greedy correction: "gpu" / "tpu" kernel, "reference"; None: the backend's
    candidates: int = 0  # > 0: correct only the k highest base logits of each draft row (0: the full vocabulary)
    head_kernel: str | None = None  # greedy candidate loop on GPU: "step" (a kernel per draft) or "block" (one)
    candidate_chunk: int = 0  # > 0: approximate candidates, the best token of each of the k best chunks of this size
    select_kernel: bool = True  # GPU head kernels: candidates from the sort-free selection kernel (False: XLA's sorts)
    head_drafts: int = 0  # > 0: only the first M drafts go through the head; later ones take the base argmax
    # > 0: the head stops once the running product of its drafts' candidate probabilities falls below this; later
    # drafts take the base argmax (greedy, candidates > 0; saves head time on blocks unlikely to be accepted that deep)
    head_stop: float = 0.0

    def __post_init__(self):  # here, not only in build, so the CLI catches a bad value before loading the model
        if not 0.0 <= self.head_stop < 1.0:
            raise UserError(f"head_stop must be in [0, 1) (0: off), got {self.head_stop}")
        if self.head_stop and not self.candidates:
            raise UserError("head_stop needs candidates > 0: the confidence is a softmax over each row's candidates")
        if self.head_stop and self.draft_temperature > 0:
            raise UserError(f"head_stop applies to greedy drafting only (draft_temperature 0), got draft_temperature "
                            f"{self.draft_temperature}")

    def _backbone(self, model):
        return model.backbone

    def _draft(self, model, params, rows, base, root, key):
        # graft_tail drafts through here too (Domino._draft(self, ...)), without a head_stop field
        return model.head.draft(params["embed"], rows, base, root, choose=self._choose(key), platform=self.kernel,
                                candidates=self.candidates, table=params.get("gru_table"), fused=self.head_kernel,
                                candidate_chunk=self.candidate_chunk, select_kernel=self.select_kernel,
                                head_drafts=self.head_drafts, head_stop=getattr(self, "head_stop", 0.0))
