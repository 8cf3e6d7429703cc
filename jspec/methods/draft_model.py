"""`draft_model`: a small LM drafts a greedy chain of up to `gamma` tokens, or a tree; its KV cache lives in the
method state.

With `min_confidence` = c > 0 the chain length adapts: drafting stops after the first draft whose drafter
probability (softmax max) is below c, and the remaining slots stay empty. A batch stops drafting when every row has
stopped, so unconfident steps skip the later drafter forwards, the bulk of a step's cost when target and drafter
are both small. Verification is unchanged, so decoding stays lossless.

Bookkeeping: `fed[b]` counts the tokens whose drafter K/V is valid. After a step with k of gamma drafts accepted the
drafter has fed root, d1 .. d_{gamma-1}, of which root, d1 .. dk are committed, so the valid count is
min(fed, committed). What the drafter still has to read before drafting (history[fed : history_len]) is therefore
the bonus token, plus d_gamma when the whole chain was accepted: at most two tokens.

With `top_k` = k > 0 the drafter grows an EAGLE-2 dynamic tree instead (`jspec.drafters.dynamic_tree`): `gamma`
levels, the k best children of each of the k best frontier nodes per level, reranked to `budget` slots. A level is
one drafter forward over its k frontier tokens, so the tree costs the chain's gamma forwards and verifies more
candidates. The tree's drafter K/V lands in scratch slots past the root, so only the committed prefix up to the root
stays valid: the next step first feeds the accepted path and the bonus token, at most gamma + 1 tokens.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from jspec.drafters.dynamic_tree import build_dynamic_tree, window_size
from jspec.errors import UserError
from jspec.methods.base import Context, Method
from jspec.models.cache import BlockMask, KVCache, causal_block_mask
from jspec.tree import chain


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DrafterState:
    cache: KVCache
    fed: jax.Array  # [B] tokens with valid drafter K/V


@dataclasses.dataclass(frozen=True)
class DraftModel(Method):
    name: str = "draft_model"
    drafter: nnx.GraphDef | None = None
    gamma: int = 4
    min_confidence: float = 0.0  # stop drafting after a draft the drafter gives less probability (0: always gamma)
    top_k: int = 0  # > 0: a dynamic tree with top_k children per node instead of a chain
    budget: int = 16  # slots of the tree (root included); top_k > 0 only

    def __post_init__(self):
        if self.gamma < 1:
            raise UserError(f"draft_model gamma must be >= 1, got {self.gamma}")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise UserError(f"draft_model min confidence must be in [0, 1], got {self.min_confidence}")
        if self.top_k < 0 or (self.top_k and self.budget < 2):
            raise UserError(f"draft_model tree needs top_k >= 1 and a budget >= 2, got top_k {self.top_k}, "
                            f"budget {self.budget}")
        if self.top_k and self.min_confidence:
            raise UserError("draft_model's min confidence applies to the chain (top_k 0), not to the tree")

    @property
    def tree_size(self) -> int:
        return self.budget if self.top_k else 1 + self.gamma

    @property
    def pending(self) -> int:
        """Tokens the drafter may have to catch up on at the start of a step (see the module docstring)."""
        return self.gamma + 1 if self.top_k else 2

    @property
    def max_depth(self) -> int:
        return self.gamma

    def init_state(self, params, batch: int, max_cache_len: int) -> DrafterState:
        model = nnx.merge(self.drafter, params)
        dtype = jax.tree.leaves(params)[0].dtype
        window = window_size(self.top_k, self.gamma) if self.top_k else 0  # the tree's scratch slots
        return DrafterState(cache=KVCache.init(model.cfg, batch, max_cache_len + window, dtype),
                            fed=jnp.zeros((batch,), jnp.int32))

    def prefill(self, params, state: DrafterState, tokens, prompt_lens, first_token, features) -> DrafterState:
        model = nnx.merge(self.drafter, params)
        b, t = tokens.shape
        positions = jnp.broadcast_to(jnp.arange(t), (b, t))
        _, cache, _ = model(tokens, positions, state.cache,
                            causal_block_mask(jnp.zeros((b,), jnp.int32), positions < prompt_lens[:, None]))
        return DrafterState(cache=cache, fed=prompt_lens)

    def propose(self, params, state: DrafterState, ctx: Context):
        model = nnx.merge(self.drafter, params)
        fed = jnp.minimum(state.fed, ctx.lengths)
        pending = ctx.history_len - fed  # ends with the root
        h, p = ctx.history.shape[1], self.pending
        idx = jnp.clip(fed[:, None] + jnp.arange(p), 0, h - 1)
        block = jnp.take_along_axis(ctx.history, idx, axis=1)
        unread = jnp.arange(p)[None, :] < pending[:, None]
        hidden, cache, _ = model(block, fed[:, None] + jnp.arange(p), state.cache, causal_block_mask(fed, unread))
        last = jnp.take_along_axis(hidden, (pending - 1)[:, None, None], axis=1)[:, 0]
        logits = model.logits(last)  # the root's children
        fed = fed + pending
        if self.top_k:
            return self._tree(model, ctx.root, logits, cache, fed)
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        if self.min_confidence > 0:
            drafts, valid, cache, fed = self._adaptive_chain(model, token, _confident(logits, self.min_confidence),
                                                             cache, fed)
        else:
            drafts = [token]
            for _ in range(self.gamma - 1):  # static unroll: gamma is small
                token, cache, fed = _draft_next(model, token, cache, fed)
                drafts.append(token)
            drafts, valid = jnp.stack(drafts, axis=1), jnp.ones((token.shape[0], self.gamma), bool)
        tokens = jnp.concatenate([ctx.root[:, None], drafts], axis=1)
        tree = chain(tokens, jnp.concatenate([jnp.ones_like(valid[:, :1]), valid], axis=1))
        return tree, DrafterState(cache=dataclasses.replace(cache, lengths=fed), fed=fed)

    def _tree(self, model, root, root_logits, cache, fed):
        """The dynamic tree below the root (whose drafter K/V is at slot fed - 1, the tree window's slot 0)."""
        root_slot = fed - 1

        def level(cache, tokens, window_slots, block, offset, depth):
            positions = jnp.broadcast_to(root_slot[:, None] + depth, tokens.shape)
            hidden, cache, _ = model(tokens, positions, cache, BlockMask(start=root_slot, block=block, offset=offset))
            return cache, jax.nn.log_softmax(model.logits(hidden).astype(jnp.float32), axis=-1)

        first = jax.nn.log_softmax(root_logits.astype(jnp.float32), axis=-1)
        tree, _, cache = build_dynamic_tree(level, cache, root, first, top_k=self.top_k, depth=self.gamma,
                                            budget=self.budget)
        # Only the prefix up to the root is committed; the window past it is scratch.
        return tree, DrafterState(cache=dataclasses.replace(cache, lengths=fed), fed=fed)

    def _adaptive_chain(self, model, first, keep, cache, fed):
        """Drafts 2..gamma while some row is still confident. Draft i is valid iff every earlier draft of its row
        was confident; rows that stopped still feed their own chain (their K/V past the verified prefix is never
        counted as valid, see the module docstring)."""
        b = first.shape[0]
        drafts = jnp.zeros((b, self.gamma), jnp.int32).at[:, 0].set(first)
        valid = jnp.zeros((b, self.gamma), bool).at[:, 0].set(True)

        def body(carry):
            i, token, keep, drafts, valid, cache, fed = carry
            token, logits, cache, fed = _draft_next(model, token, cache, fed, with_logits=True)
            drafts = drafts.at[:, i].set(token)
            valid = valid.at[:, i].set(keep)
            return i + 1, token, keep & _confident(logits, self.min_confidence), drafts, valid, cache, fed

        carry = (jnp.ones((), jnp.int32), first, keep, drafts, valid, cache, fed)
        _, _, _, drafts, valid, cache, fed = jax.lax.while_loop(
            lambda c: (c[0] < self.gamma) & jnp.any(c[2]), body, carry)
        return drafts, valid, cache, fed


def _draft_next(model, token, cache, fed, with_logits: bool = False):
    """Feeds each row's last draft and drafts the next token greedily."""
    hidden, cache, _ = model(token[:, None], fed[:, None], cache,
                             causal_block_mask(fed, jnp.ones_like(token, bool)[:, None]))
    logits = model.logits(hidden[:, 0])
    token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return (token, logits, cache, fed + 1) if with_logits else (token, cache, fed + 1)


def _confident(logits, min_confidence: float):
    """Whether the drafter's top token has probability >= min_confidence."""
    logits = logits.astype(jnp.float32)
    top_logprob = jnp.max(logits, axis=-1) - jax.nn.logsumexp(logits, axis=-1)
    return top_logprob >= jnp.log(min_confidence)
