"""`pld`: Prompt Lookup Decoding — a chain of up to 10 tokens copied from an earlier n-gram match."""

import dataclasses

import jax.numpy as jnp

from jspec.methods.base import Context, Method
from jspec.retrieval.pld import lookup
from jspec.tree import chain


@dataclasses.dataclass(frozen=True)
class PromptLookup(Method):
    name: str = "pld"
    max_ngram: int = 3
    num_pred: int = 10

    @property
    def tree_size(self) -> int:
        return 1 + self.num_pred

    @property
    def max_depth(self) -> int:
        return self.num_pred

    def propose(self, params, state, ctx: Context):
        candidates, found = lookup(ctx.history, ctx.history_len, self.max_ngram, self.num_pred)
        tokens = jnp.concatenate([ctx.root[:, None], candidates], axis=1)
        valid = jnp.concatenate([jnp.ones_like(found)[:, None], jnp.broadcast_to(found[:, None], candidates.shape)],
                                axis=1)
        return chain(tokens, valid), state
