"""`eagle3`: an EAGLE-3 drafter grows an EAGLE-2 dynamic tree of `budget` slots each step.

The drafter reads pairs (target feature g_p, embedding of token p + 1) and predicts token p + 2; g_p concatenates
the target's hidden states at the tap layers. After a verification the accepted path's features become the next
pairs to feed: pair j = (g at path node j, embedding of the token that follows it on the path, the bonus last), so
at most `depth + 1` pairs are pending, kept in the method state. The last fed pair is the drafter-side root of the
next tree: its output predicts the root's children, and its hidden state feeds the first level's nodes.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from jspec.drafters.dynamic_tree import DraftTreeInfo, build_dynamic_tree, window_size
from jspec.methods.base import Context, Method
from jspec.models.cache import BlockMask, KVCache, causal_block_mask
from jspec.tree import Tree


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Eagle3State:
    cache: KVCache  # one layer; pair p at slot p
    fed: jax.Array  # [B] pairs in the cache
    pend_feat: jax.Array  # [B, P, 3H] features of pairs still to feed
    pend_tok: jax.Array  # [B, P] the token paired with each feature
    pend_n: jax.Array  # [B]


@dataclasses.dataclass(frozen=True)
class Eagle3(Method):
    name: str = "eagle3"
    drafter: nnx.GraphDef | None = None
    taps: tuple[int, ...] = ()
    budget: int = 60
    top_k: int = 10
    depth: int = 5

    @property
    def tree_size(self) -> int:
        return self.budget

    @property
    def max_depth(self) -> int:
        return self.depth

    @property
    def target_taps(self) -> tuple[int, ...]:
        return self.taps

    @property
    def pending(self) -> int:
        """Pairs an accepted path can leave to feed: its nodes, the root included."""
        return self.max_depth + 1

    def init_state(self, params, batch: int, max_cache_len: int) -> Eagle3State:
        drafter = nnx.merge(self.drafter, params["drafter"])
        dtype = params["embed"].dtype
        width = drafter.cfg.target_hidden_size * len(self.taps)
        # The tree's scratch window lives past the committed pairs.
        cache = drafter.init_cache(batch, max_cache_len + window_size(self.top_k, self.depth), dtype)
        return Eagle3State(cache=cache, fed=jnp.zeros((batch,), jnp.int32),
                           pend_feat=jnp.zeros((batch, self.pending, width), dtype),
                           pend_tok=jnp.zeros((batch, self.pending), jnp.int32), pend_n=jnp.zeros((batch,), jnp.int32))

    def prefill(self, params, state: Eagle3State, tokens, prompt_lens, first_token, features) -> Eagle3State:
        """Feeds the prompt's pairs (g_p, x_{p+1}) but the last, which pairs the last prompt feature with the first
        token and is left pending: the first propose feeds it and reads the root's children off its output."""
        drafter = nnx.merge(self.drafter, params["drafter"])
        b, t = tokens.shape
        nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros((b, 1), tokens.dtype)], axis=1)
        nxt = jnp.where(jnp.arange(t)[None, :] == (prompt_lens - 1)[:, None], first_token[:, None], nxt)
        positions = jnp.broadcast_to(jnp.arange(t), (b, t))
        _, _, cache = drafter(params["embed"], nxt, features.astype(params["embed"].dtype), positions, state.cache,
                              causal_block_mask(jnp.zeros((b,), jnp.int32), positions < prompt_lens[:, None] - 1))
        last = jnp.take_along_axis(features, (prompt_lens - 1)[:, None, None], axis=1)
        pend_feat = state.pend_feat.at[:, :1].set(last.astype(state.pend_feat.dtype))
        pend_tok = state.pend_tok.at[:, 0].set(first_token)
        return Eagle3State(cache=cache, fed=prompt_lens - 1, pend_feat=pend_feat, pend_tok=pend_tok,
                           pend_n=jnp.ones((b,), jnp.int32))

    def propose(self, params, state: Eagle3State, ctx: Context):
        tree, _, state = self.draft_tree(params, state, ctx)
        return tree, state

    def draft_tree(self, params, state: Eagle3State, ctx: Context, **pruning) -> tuple[Tree, DraftTreeInfo,
                                                                                        Eagle3State]:
        """Feeds the pending pairs, grows the dynamic tree (`pruning`: build_dynamic_tree's checkpoint options)."""
        drafter = nnx.merge(self.drafter, params["drafter"])
        embed = params["embed"]
        b, p = state.pend_tok.shape
        valid = jnp.arange(p)[None, :] < state.pend_n[:, None]
        positions = state.fed[:, None] + jnp.arange(p)[None, :]
        hidden, logits, cache = drafter(embed, state.pend_tok, state.pend_feat, positions, state.cache,
                                        causal_block_mask(state.fed, valid))
        last = (state.pend_n - 1)[:, None, None]
        root_hidden = jnp.take_along_axis(hidden, last, axis=1)[:, 0]
        first_logprobs = jax.nn.log_softmax(jnp.take_along_axis(logits, last, axis=1)[:, 0], axis=-1)
        fed = state.fed + state.pend_n
        root_slot = fed - 1  # the drafter-side root: the last fed pair
        w = window_size(self.top_k, self.depth)
        buffer = jnp.zeros((b, w, root_hidden.shape[-1]), root_hidden.dtype).at[:, 0].set(root_hidden)

        def step(carry, tokens, window_slots, block, offset, depth):
            cache, buffer = carry
            # A node's parent is the highest window slot below `offset` that it sees.
            seen = block[:, :, :offset] & (jnp.arange(offset) > 0)[None, None, :]
            parent = jnp.where(jnp.any(seen, -1), offset - 1 - jnp.argmax(seen[:, :, ::-1], axis=-1), 0)
            feats = jnp.take_along_axis(buffer, parent[:, :, None], axis=1)
            pos = root_slot[:, None] + depth
            out, lg, cache = drafter(embed, tokens, feats, jnp.broadcast_to(pos, tokens.shape), cache,
                                     BlockMask(start=root_slot, block=block, offset=offset))
            buffer = jax.vmap(lambda buf, s, o: buf.at[s].set(o))(buffer, window_slots, out)
            return (cache, buffer), jax.nn.log_softmax(lg, axis=-1)

        token_ids = jnp.arange(drafter.d2t.shape[0]) + drafter.d2t[...]
        tree, info, (cache, _) = build_dynamic_tree(step, (cache, buffer), ctx.root, first_logprobs,
                                                    top_k=self.top_k, depth=self.depth, budget=self.budget,
                                                    token_ids=token_ids, **pruning)
        return tree, info, dataclasses.replace(state, cache=cache, fed=fed, pend_n=jnp.zeros_like(state.pend_n))

    def observe(self, params, state: Eagle3State, tree, logits, acceptance, features) -> Eagle3State:
        p = self.pending
        path = acceptance.path[:, :p]
        pend_feat = jnp.take_along_axis(features, path[:, :, None], axis=1).astype(state.pend_feat.dtype)
        return dataclasses.replace(state, pend_feat=pend_feat, pend_tok=acceptance.new_tokens[:, :p],
                                   pend_n=acceptance.path_len)
