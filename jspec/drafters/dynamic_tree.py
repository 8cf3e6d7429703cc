"""EAGLE-2 dynamic draft tree, static-shape and drafter-agnostic (docs/algorithms.md §4.4).

Expansion: level 1 is the top_k children of the root; each further level feeds the current frontier (the top_k nodes
of the deepest level by cumulative log-prob) to the drafter, takes the top_k children of every frontier node and
stores all top_k² of them. Rerank: of the top_k + (depth − 1)·top_k² stored candidates, the budget − 1 of highest
cumulative log-prob become the tree (slot 0 is the root), sorted by (depth, candidate index) so parents come first.

Window convention (drafter side). The caller's drafter forward over the newly committed tokens ends with the root,
so the root's drafter K/V sits at cache slot `start[b]` (= the root's position). The nodes fed to the drafter live in
a window of `window_size(top_k, depth)` = 1 + top_k·(depth − 1) slots from `start`: window slot 0 is the root, level
l's frontier (l = 1 .. depth − 1; level `depth` is never fed) takes window slots 1 + (l − 1)·top_k ... l·top_k in
frontier order. `step_fn` gets exactly what `BlockMask(start, block, offset)` needs, so a drafter's level forward is
its usual forward with that mask and positions `start + depth`. Window slots past the root are scratch: the tree
writes drafter K/V there and the next committed tokens overwrite it.

Connectivity under ties and −inf: a candidate's score is its parent's plus a log-prob clamped to ≤ 0, so it never
exceeds its parent's. The rerank order (score descending, then storage index, which grows with depth) therefore ranks
every parent ahead of its children, so a selected node's parent is always selected. Candidates of score −inf (or NaN)
are invalid and so are all their descendants.

Pruning checkpoints (Graft, docs/algorithms.md §2.2). Checkpoint d judges tree level d + 1: "depth 0" the root's
children (read off `first_logprobs`, before any `step_fn` call), "depth 1" level 2, "depth 5" level 6. Its
confidence is c_d = exp(max cumulative log-prob over that level's stored candidates); a row with c_d < τ_d stops
expanding there (its frontier is dead from then on, its deeper candidates −inf) and keeps only the `keep[i]` best
nodes of the rerank: the top by score among the nodes expanded so far, a connected subtree by the argument above.
The levels between two checkpoints form one `lax.cond`: when no row of the batch is still expanding, their
`step_fn` calls are skipped, so a batch of one saves the drafting compute (one branch per segment, not per level:
on GPU each branch decision reads its predicate on the host). A checkpoint deeper than depth − 1 never fires (its
level is never drafted).
"""

import dataclasses
import functools
from typing import Protocol

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PyTree

from jspec.tree import Tree, from_parents


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DraftTreeInfo:
    """Drafter confidences for Graft's checkpoints: c_d = exp(best_by_depth[:, d])."""

    scores: Float[Array, "B N"]  # cumulative log-prob of each tree slot; root 0, invalid slots -inf
    best_by_depth: Float[Array, "B D1"]  # max cumulative log-prob over all stored candidates of each depth; [:, 0] = 0
    stage: Int[Array, " B"]  # index of the checkpoint that pruned the row; len(checkpoints) if none did


class StepFn(Protocol):
    def __call__(self, carry: PyTree, tokens: Int[Array, "B K"], window_slots: Int[Array, "B K"],
                 block: Bool[Array, "B K W"], offset: int, depth: int) -> tuple[PyTree, Float[Array, "B K V"]]:
        """One drafter forward over a frontier of K = top_k nodes, all at tree depth `depth`.

        Node i is written at window slot `offset + i` (= `window_slots[:, i]`) and sees window slot j iff
        `block[:, i, j]` (itself, its ancestors and the root at slot 0); a row that does not see its own slot is
        padding (a dead node), whose output is ignored. Node i's parent is the highest window slot below `offset`
        that it sees (0: the root), which is where a drafter feeding back its own hidden states finds the parent's.
        Returns log-probs over the drafter's columns for each node's children.
        """


def window_size(top_k: int, depth: int) -> int:
    """Drafter cache slots the tree uses from the root's slot on (the caller must leave them free)."""
    return 1 + top_k * (depth - 1)


def build_dynamic_tree(step_fn: StepFn, carry: PyTree, root_tokens: Int[Array, " B"],
                       first_logprobs: Float[Array, "B V"], *, top_k: int, depth: int, budget: int,
                       token_ids: Int[Array, " V"] | None = None, checkpoints: tuple[int, ...] = (),
                       thresholds: Float[Array, "*B C"] | None = None, keep: tuple[int, ...] | None = None
                       ) -> tuple[Tree, DraftTreeInfo, PyTree]:
    """Builds a `budget`-slot tree of at most `depth` levels; `step_fn` is called up to depth − 1 times.

    `first_logprobs` are the drafter's log-probs for the root's children. `token_ids[c]` is the token of log-prob
    column c (EAGLE-3's reduced draft vocabulary: c + d2t[c]); the identity when None. Frontier tokens passed to
    `step_fn` and tree tokens are token ids. Slots beyond the valid candidates are invalid.

    Pruning (module docstring): `checkpoints` are ascending checkpoint depths, `thresholds[..., i]` is τ of
    checkpoints[i] ([C] or per row [B, C]; 0 never prunes), `keep[s]` the draft nodes kept in stage s (pruned at
    checkpoints[s]; s = C: not pruned), each at most budget − 1; None keeps budget − 1 in every stage.
    """
    if min(top_k, depth, budget) < 1:
        raise ValueError(f"top_k, depth and budget must be >= 1, got {top_k}, {depth}, {budget}")
    if list(checkpoints) != sorted(set(checkpoints)) or any(d < 0 for d in checkpoints) or (
            checkpoints and thresholds is None):
        raise ValueError(f"checkpoints must be distinct ascending depths >= 0 with thresholds, got {checkpoints}")
    keep = (budget - 1,) * (len(checkpoints) + 1) if keep is None else tuple(keep)
    if len(keep) != len(checkpoints) + 1 or not all(0 <= k < budget for k in keep):
        raise ValueError(f"keep needs one count in 0..{budget - 1} per stage ({len(checkpoints) + 1}), got {keep}")
    b = root_tokens.shape[0]
    width = window_size(top_k, depth)
    rows = jnp.arange(b)[:, None]
    log_tau = None if thresholds is None else jnp.log(jnp.asarray(thresholds, jnp.float32))
    stage = jnp.full((b,), len(checkpoints), jnp.int32)
    expanding = jnp.ones((b,), bool)

    def judge(level, level_score, stage, expanding):
        """The checkpoint at `level`, if any: rows below its threshold stop expanding."""
        for i, d in enumerate(checkpoints):
            if d + 1 == level:
                pruned = expanding & (level_score.max(axis=1) < log_tau[..., i])
                stage, expanding = jnp.where(pruned, i, stage), expanding & ~pruned
        return stage, expanding

    def top_children(logprobs):
        values, cols = jax.lax.top_k(_clean(logprobs), top_k)  # stable: equal scores keep column order
        return values, (cols if token_ids is None else token_ids[cols]).astype(jnp.int32)

    def forward(carry, tok, slots, anc, offset, level):
        carry, logprobs = step_fn(carry, tok, jnp.broadcast_to(slots, (b, top_k)), anc, offset, level)
        return carry, *top_children(logprobs)  # [B, K, K]

    def no_forward(carry, *_):  # every row pruned: no children, the drafter is not called
        return carry, jnp.full((b, top_k, top_k), -jnp.inf, jnp.float32), jnp.zeros((b, top_k, top_k), jnp.int32)

    def grow(expand, levels, expanding, frontier):
        """Expands `levels` (feeding level l gives level l + 1); returns the new deepest level and what to store."""
        carry, cand_score, cand_tok, cand_idx, cand_anc = frontier
        stored = []
        for level in levels:
            score, pick = jax.lax.top_k(cand_score, top_k)  # the frontier: this level's best top_k
            live = (score > -jnp.inf) & expanding[:, None]
            score = jnp.where(live, score, -jnp.inf)
            offset = 1 + (level - 1) * top_k
            slots = offset + jnp.arange(top_k)
            tok = jnp.take_along_axis(cand_tok, pick, axis=1)
            anc = jnp.take_along_axis(cand_anc, pick[:, :, None], axis=1) | jax.nn.one_hot(slots, width, dtype=bool)
            anc = anc & live[:, :, None]
            carry, child_score, child_tok = expand(carry, tok, slots, anc, offset, level)
            # A dead node (-inf) has dead children: cleaned log-probs are never NaN or +inf, whatever its row held.
            cand_score = (score[:, :, None] + child_score).reshape(b, -1)
            cand_tok = child_tok.reshape(b, -1)
            cand_parent = jnp.repeat(jnp.take_along_axis(cand_idx, pick, axis=1), top_k, axis=1)
            cand_anc = jnp.repeat(anc, top_k, axis=1)
            cand_idx = top_k + (level - 1) * top_k**2 + jnp.broadcast_to(jnp.arange(top_k**2), (b, top_k**2))
            stored.append((cand_score, cand_tok, cand_parent))
        return (carry, cand_score, cand_tok, cand_idx, cand_anc), stored

    # The deepest level's candidates: scores, tokens, storage index, parent's storage index, ancestors in the window.
    cand_score, cand_tok = top_children(first_logprobs)
    frontier = (carry, cand_score, cand_tok, jnp.broadcast_to(jnp.arange(top_k), (b, top_k)),
                jnp.zeros((b, top_k, width), bool).at[:, :, 0].set(True))
    stored = [(cand_score, cand_tok, jnp.full((b, top_k), -1, jnp.int32))]
    # Segments of levels between checkpoints: the rows expanding stay the same within one, so one branch decides.
    cuts = sorted({1, depth} | {d + 1 for d in checkpoints if d + 1 < depth})
    for lo, hi in zip(cuts, cuts[1:]):
        stage, expanding = judge(lo, frontier[1], stage, expanding)
        if checkpoints:  # a real branch: with every row pruned the drafter forwards are not run
            frontier, new = jax.lax.cond(jnp.any(expanding), functools.partial(grow, forward, range(lo, hi)),
                                         functools.partial(grow, no_forward, range(lo, hi)), expanding, frontier)
        else:
            frontier, new = grow(forward, range(lo, hi), expanding, frontier)
        stored += new
    carry, cand_score = frontier[:2]
    stage, _ = judge(depth, cand_score, stage, expanding)  # a checkpoint at the last level only sets the stage
    all_score, all_tok, all_parent = (jnp.concatenate(x, axis=1) for x in zip(*stored))
    num_cand = all_score.shape[1]
    n = min(budget - 1, num_cand)
    sel_score, sel = jax.lax.top_k(all_score, n)  # stable: ties go to the lower index, i.e. the shallower node
    kept = (sel_score > -jnp.inf) & (jnp.arange(n)[None, :] < jnp.asarray(keep, jnp.int32)[stage][:, None])
    # Storage order is (depth, index): sorting the selection puts parents first; dead or unkept picks go last.
    key = jnp.sort(jnp.where(kept, sel, sel + num_cand), axis=1)
    valid = key < num_cand
    sel = jnp.where(valid, key, key - num_cand)
    slot_of = jnp.zeros((b, num_cand), jnp.int32).at[rows, sel].set(jnp.arange(1, n + 1, dtype=jnp.int32))
    parent = jnp.take_along_axis(all_parent, sel, axis=1)
    parent_slot = jnp.where(parent < 0, 0, jnp.take_along_axis(slot_of, jnp.maximum(parent, 0), axis=1))
    pad = budget - 1 - n
    tokens = jnp.concatenate([root_tokens[:, None].astype(jnp.int32), jnp.take_along_axis(all_tok, sel, axis=1),
                              jnp.zeros((b, pad), jnp.int32)], axis=1)
    parents = jnp.concatenate([jnp.full((b, 1), -1, jnp.int32), parent_slot, jnp.full((b, pad), -1, jnp.int32)],
                              axis=1)
    valid = jnp.concatenate([jnp.ones((b, 1), bool), valid, jnp.zeros((b, pad), bool)], axis=1)
    tree = from_parents(tokens, parents, valid, max_depth=depth)
    slot_score = jnp.concatenate([jnp.zeros((b, 1)), jnp.take_along_axis(all_score, sel, axis=1),
                                  jnp.zeros((b, pad))], axis=1)
    best = jnp.stack([jnp.zeros((b,))] + [s.max(axis=1) for s, _, _ in stored], axis=1)
    info = DraftTreeInfo(scores=jnp.where(tree.valid, slot_score, -jnp.inf), best_by_depth=best, stage=stage)
    return tree, info, carry


def _clean(logprobs: Float[Array, "*S V"]) -> Float[Array, "*S V"]:
    """float32 (bf16 sums drift), ≤ 0 (the connectivity argument), NaN → −inf (top_k would rank NaN first)."""
    logprobs = logprobs.astype(jnp.float32)
    return jnp.where(jnp.isnan(logprobs), -jnp.inf, jnp.minimum(logprobs, 0.0))
