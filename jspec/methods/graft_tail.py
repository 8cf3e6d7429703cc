"""`graft_tail`: Graft on a block drafter (docs/algorithms.md §2.2, "Graft(TAIL)"): the DFlash or Domino drafter's
confident prefix, then candidates retrieved from the adjacency matrix in the slots its tail would have taken.

Each step the drafter runs its block as in `dflash` / `domino` (a Domino checkpoint drafts through its correction
head). Draft i's confidence c_i is the probability the drafter gave it: its max softmax probability when drafting is
greedy (with `draft_temperature > 0`, the tempered distribution it was sampled from). Rule: keep the longest prefix
d_1 .. d_m whose cumulative confidence c_1 · … · c_m stays >= `threshold`, an estimate of the chance that the whole
prefix is accepted; the first draft whose product falls below the threshold and everything after it are dropped.
The remaining `budget − 1 − m` slots are filled by retrieval rooted at the last kept token (d_m, or the root when
m = 0): `tail="chain"` follows each token's top successor, `tail="tree"` the Token Recycling 2.2.2 template's BFS
prefix of that size, so the retrieved part is always a tree hanging below the kept chain. `budget` counts the
verification slots with the root and defaults to the drafter's own chain (B for DFlash, B + 1 for Domino), so at the
default the target verifies exactly as many tokens as plain dflash / domino.

The adjacency matrix is Token Recycling's (jspec.retrieval.adjacency): after every verification each verified node's
row becomes the top-k of the target's logits there; it persists across prompts (hot start) and saves/loads in
token_recycling's file format. The tree never depends on the target's coins, so the shared acceptance rule
(jspec.verify) keeps greedy and sampled decoding lossless.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jspec.errors import UserError
from jspec.methods.base import Context
from jspec.methods.dflash import DFlash, DFlashState, Domino
from jspec.retrieval import adjacency
from jspec.retrieval.templates import K, TR_SIZE, Template, tr_prefix
from jspec.tree import from_parents

TAILS = ("chain", "tree")


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class GraftTailState:
    draft: DFlashState | None  # per call (`resume_state` rebuilds it); None in a loaded state
    adjacency: adjacency.Adjacency


@functools.cache
def tail_template(tail: str, size: int) -> Template:
    """The retrieval tree of `size` nodes with its root: a rank-0 chain, or the 2.2.2 tree's BFS prefix."""
    if tail == "chain":
        return Template.from_parents(np.arange(size) - 1, np.zeros(size, np.int32))
    return tr_prefix(size)


@dataclasses.dataclass(frozen=True)
class GraftTail(DFlash):
    name: str = "graft_tail"
    head: bool = False  # a Domino drafter: draft through its correction head (set by methods.dflash_method)
    kernel: str | None = None  # Domino's greedy correction kernel (see methods.dflash.Domino)
    candidates: int = 0  # Domino's candidate-restricted correction (see methods.dflash.Domino)
    head_kernel: str | None = None  # Domino's candidate loop as GPU kernels (see methods.dflash.Domino)
    candidate_chunk: int = 0  # Domino's approximate candidates (see methods.dflash.Domino)
    select_kernel: bool = True  # Domino's candidate selection kernel (see methods.dflash.Domino)
    head_drafts: int = 0  # Domino's head corrects only the first M drafts (see methods.dflash.Domino)
    vocab_size: int = 0  # set from the target by methods.dflash_method
    k: int = K
    threshold: float = 0.3  # keep drafts while their cumulative confidence stays >= this
    budget: int | None = None  # verification slots with the root; None: the drafter's chain, 1 + num_drafts
    tail: str = "chain"

    def __post_init__(self):
        if not 0.0 <= self.threshold <= 1.0:
            raise UserError(f"graft_tail threshold must be in [0, 1], got {self.threshold}")
        if self.tail not in TAILS:
            raise UserError(f"graft_tail tail must be one of {', '.join(TAILS)}, got {self.tail!r}")
        if self.budget is not None and not 2 <= self.budget <= (TR_SIZE if self.tail == "tree" else self.budget):
            raise UserError(f"graft_tail budget must be >= 2 (and <= {TR_SIZE} with the tree tail), got "
                            f"{self.budget}")
        need = K if self.tail == "tree" else 1  # the 2.2.2 template reaches rank 7
        if self.k < need:
            raise UserError(f"graft_tail needs k >= {need} successors per token with the {self.tail} tail, got "
                            f"{self.k}")

    @property
    def tree_size(self) -> int:
        return self.budget or 1 + self.num_drafts

    @property
    def kept_max(self) -> int:
        """Most drafts a tree can keep."""
        return min(self.num_drafts, self.tree_size - 1)

    @property
    def max_depth(self) -> int:
        depths = tail_template(self.tail, self.tree_size).depths
        return max(m + int(depths[: self.tree_size - m].max()) for m in range(self.kept_max + 1))

    def _backbone(self, model):
        return model.backbone if self.head else model

    def _draft(self, model, params, rows, base, root, key):
        if self.head:
            return Domino._draft(self, model, params, rows, base, root, key)
        return super()._draft(model, params, rows, base, root, key)

    def init_state(self, params, batch: int, max_cache_len: int) -> GraftTailState:
        if self.vocab_size < 1:
            raise UserError("graft_tail needs the target's vocabulary size")
        return GraftTailState(draft=super().init_state(params, batch, max_cache_len),
                              adjacency=adjacency.init(self.vocab_size, self.k))

    def resume_state(self, params, state: GraftTailState, batch: int, max_cache_len: int) -> GraftTailState:
        return dataclasses.replace(state, draft=DFlash.init_state(self, params, batch, max_cache_len))

    def prefill(self, params, state: GraftTailState, tokens, prompt_lens, first_token, features) -> GraftTailState:
        return dataclasses.replace(state, draft=super().prefill(params, state.draft, tokens, prompt_lens,
                                                                first_token, features))

    def confidence(self, params, rows, base, root, drafts):
        """Probability of each draft under the distribution it was chosen from (corrected logits with a head)."""
        logits = base
        if self.head:
            head = nnx.merge(self.drafter, params["drafter"]).head
            prev = jnp.concatenate([root[:, None], drafts[:, :-1]], axis=1)
            logits = head.teacher_forced_logits(params["embed"], rows, base, prev)
            if self.head_drafts:  # drafts past the head's took the base logits' choice
                logits = jnp.where(jnp.arange(logits.shape[1])[None, :, None] < self.head_drafts, logits, base)
        probs = jax.nn.softmax(logits / (self.draft_temperature or 1.0), axis=-1)
        return jnp.take_along_axis(probs, drafts[..., None], axis=-1)[..., 0]

    def propose(self, params, state: GraftTailState, ctx: Context):
        drafts, rows, base, draft_state = self.draft_block(params, state.draft, ctx)
        b, n = drafts.shape[0], self.tree_size
        conf = self.confidence(params, rows, base, ctx.root, drafts)[:, : self.kept_max]
        kept = jnp.sum(jnp.cumprod(conf, axis=-1) >= self.threshold, axis=-1, dtype=jnp.int32)  # m per row
        chain_tokens = jnp.concatenate([ctx.root[:, None], drafts[:, : self.kept_max]], axis=1)
        last = jnp.take_along_axis(chain_tokens, kept[:, None], axis=1)[:, 0]
        t = tail_template(self.tail, n)
        retrieved = adjacency.retrieve(state.adjacency, last, t.parents, t.ranks)  # [B, n], node 0 = last
        slot = jnp.arange(n)[None, :]
        node = jnp.clip(slot - kept[:, None], 0, n - 1)  # template node of a retrieved slot
        is_draft = slot <= kept[:, None]
        tokens = jnp.where(is_draft, jnp.take_along_axis(chain_tokens, jnp.minimum(slot, self.kept_max), axis=1),
                           jnp.take_along_axis(retrieved, node, axis=1))
        parents = jnp.where(is_draft, slot - 1, kept[:, None] + jnp.asarray(t.parents)[node])
        tree = from_parents(tokens, parents, jnp.ones((b, n), bool), self.max_depth)
        return tree, GraftTailState(draft=draft_state, adjacency=state.adjacency)

    def observe(self, params, state: GraftTailState, tree, logits, acceptance, features) -> GraftTailState:
        return GraftTailState(draft=super().observe(params, state.draft, tree, logits, acceptance, features),
                              adjacency=adjacency.update(state.adjacency, tree.tokens, tree.valid, logits))

    def save_state(self, state: GraftTailState, path: str) -> None:
        adjacency.save(state.adjacency, path)

    def load_state(self, path: str) -> GraftTailState:
        return GraftTailState(draft=None, adjacency=adjacency.load(path, vocab_size=self.vocab_size, k=self.k))
