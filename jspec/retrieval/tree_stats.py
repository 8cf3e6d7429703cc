"""Which nodes of a Token Recycling tree the target accepts, and the smaller tree those counts choose.

Prompts are decoded greedily with token_recycling on a base tree (by default the whole 81-slot 2.2.2 tree; a superset
such as `templates.tr_deep` measures nodes 2.2.2 lacks), its adjacency matrix warm across prompts; every step adds
one to each slot on the accepted path. `templates.best_subtree` then keeps the most-accepted
ancestor-closed subtree of a budget (`jspec calibrate --tree-out`, bench/tr_node_stats.py). The report is the tree
file `--tr-tree` reads: per node its rank path and count, the accepted length each tree would have had on these
steps, and the chosen subtree's rank paths.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
from jaxtyping import Int
from tqdm import tqdm

from jspec.methods.token_recycling import TokenRecycling
from jspec.models.loading import LoadedModel
from jspec.retrieval import adjacency
from jspec.retrieval.templates import TR_SIZE, Template, best_subtree, tr_prefix, words
from jspec.runner import run_batch
from jspec.sampling import Sampling


@dataclasses.dataclass(frozen=True)
class CountingTR(TokenRecycling):
    """Token Recycling whose state also counts, per tree slot, the steps whose accepted path went through it."""

    budget: int = TR_SIZE

    def init_state(self, params, batch, max_cache_len):
        return super().init_state(params, batch, max_cache_len), jnp.zeros((self.budget,), jnp.int32)

    def propose(self, params, state, ctx):
        tree, matrix = super().propose(params, state[0], ctx)
        return tree, (matrix, state[1])

    def observe(self, params, state, tree, logits, acceptance, features):
        matrix = super().observe(params, state[0], tree, logits, acceptance, features)
        on_path = jnp.arange(acceptance.path.shape[1])[None, :] < acceptance.path_len[:, None]
        return matrix, state[1].at[acceptance.path].add(on_path.astype(jnp.int32))


def count_accepted_nodes(model: LoadedModel, prompts: list[list[int]], *, max_new_tokens: int,
                         matrix: adjacency.Adjacency | None = None, base: Template | None = None,
                         desc: str = "token_recycling (81 slots)", progress: bool = True
                         ) -> tuple[Int[np.ndarray, " N"], int, adjacency.Adjacency]:
    """Per slot of `base` (default: the 81-slot tree), the steps that accepted it (the root: every step); the number
    of tree steps; and the adjacency matrix after the last prompt (warmed from `matrix` when given)."""
    if not prompts:
        raise ValueError("no prompts to count accepted nodes on")
    base = base or tr_prefix(TR_SIZE)
    method = CountingTR(vocab_size=model.cfg.vocab_size, budget=base.size, tree=tuple(words(base)[1:]))
    width = -(-max(map(len, prompts)) // 64) * 64  # one padded width and cache: one compilation
    state = None if matrix is None else (matrix, jnp.zeros((base.size,), jnp.int32))
    steps = 0
    for i, ids in enumerate(tqdm(prompts, desc=desc, unit="prompt", disable=not progress)):
        [record], state = run_batch(model, method, [ids], max_new_tokens=max_new_tokens, sampling=Sampling(), seed=i,
                                    max_cache_len=width + max_new_tokens + 128, method_state=state, pad_to=width)
        steps += record["steps"] - 1  # the prefill's token is not a tree step
    return np.asarray(state[1]), steps, state[0]


def tree_report(counts: Int[np.ndarray, " N"], steps: int, budget: int, base: Template | None = None,
                **meta) -> dict:
    """The tree file: counts per rank path of `base` (default: the 81-slot tree), accepted length per step of the
    whole base tree (`mat_all`), of its `budget`-slot BFS prefix (for 2.2.2: the default tree) and of the chosen
    subtree, and the chosen subtree's rank paths (root left out)."""
    base = base or tr_prefix(TR_SIZE)
    chosen = best_subtree(base, counts, budget)
    paths = words(base)
    slots = [paths.index(w) for w in words(chosen)]
    per_step = max(steps, 1)
    # accepted nodes per step, the root (the bonus token's slot) included: what MAT would have been
    return {**meta, "steps": steps, "nodes": [{"path": w, "accepted": int(c)} for w, c in zip(paths, counts)],
            "base_size": base.size, "mat_all": float(counts.sum() / per_step),
            "mat_prefix": float(counts[:budget].sum() / per_step), "mat_chosen": float(counts[slots].sum() / per_step),
            "chosen": words(chosen)[1:]}
