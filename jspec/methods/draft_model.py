"""`draft_model`: a small LM drafts a greedy chain of `gamma` tokens; its KV cache lives in the method state.

Bookkeeping: `fed[b]` counts the tokens whose drafter K/V is valid. After a step with k of gamma drafts accepted the
drafter has fed root, d1 .. d_{gamma-1}, of which root, d1 .. dk are committed, so the valid count is
min(fed, committed). What the drafter still has to read before drafting (history[fed : history_len]) is therefore
the bonus token, plus d_gamma when the whole chain was accepted: at most two tokens.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from jspec.methods.base import Context, Method
from jspec.models.cache import KVCache, causal_block_mask
from jspec.tree import chain

PENDING = 2  # tokens the drafter may have to catch up on at the start of a step


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

    @property
    def tree_size(self) -> int:
        return 1 + self.gamma

    @property
    def max_depth(self) -> int:
        return self.gamma

    def init_state(self, params, batch: int, max_cache_len: int) -> DrafterState:
        model = nnx.merge(self.drafter, params)
        dtype = jax.tree.leaves(params)[0].dtype
        return DrafterState(cache=KVCache.init(model.cfg, batch, max_cache_len, dtype),
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
        pending = ctx.history_len - fed  # 1 or 2
        h = ctx.history.shape[1]
        idx = jnp.clip(fed[:, None] + jnp.arange(PENDING), 0, h - 1)
        block = jnp.take_along_axis(ctx.history, idx, axis=1)
        valid = jnp.arange(PENDING)[None, :] < pending[:, None]
        hidden, cache, _ = model(block, fed[:, None] + jnp.arange(PENDING), state.cache,
                                 causal_block_mask(fed, valid))
        last = jnp.take_along_axis(hidden, (pending - 1)[:, None, None], axis=1)[:, 0]
        token = jnp.argmax(model.logits(last), axis=-1).astype(jnp.int32)
        fed = fed + pending
        drafts = [token]
        for _ in range(self.gamma - 1):  # static unroll: gamma is small
            hidden, cache, _ = model(token[:, None], fed[:, None], cache,
                                     causal_block_mask(fed, jnp.ones_like(token, bool)[:, None]))
            token = jnp.argmax(model.logits(hidden[:, 0]), axis=-1).astype(jnp.int32)
            fed = fed + 1
            drafts.append(token)
        tokens = jnp.stack([ctx.root, *drafts], axis=1)
        tree = chain(tokens, jnp.ones(tokens.shape, bool))
        return tree, DrafterState(cache=dataclasses.replace(cache, lengths=fed), fed=fed)
