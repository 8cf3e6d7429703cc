"""Pure-JAX Domino correction loop (jianuo-huang/Domino `code/dflash.py::spec_generate`, SpecForge `domino.py`).

Draft i of a block is chosen from `base[i] + W2 · SiLU(W1 · [z_i ; h_i])` (rows below `prefix_len`: `base[i]` alone),
where `h_i` is a bias-free GRU state that has read the target embeddings of every block token before the one being
drafted: the bonus token, then drafts 0 .. i-1. `W1 = [W_z | W_s]` is split so `W_z · z_i` is computed for all rows in
one GEMM (`z_part`) and only `W_s · h_i` is sequential.

Numerics (shared by every kernel): the GRU state and gate math are float32; matmuls take their inputs in the weight
dtype and accumulate in float32; the SiLU output is rounded to W2's dtype before the vocabulary GEMV (the tensor-core
input), then the float32 base logits are added. Greedy ties go to the lowest token id (`jnp.argmax`).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

# (logits [B, V] float32, draft index) -> chosen tokens [B]; sampled drafting supplies one.
Choose = Callable[[Float[Array, "B V"], int], Int[Array, " B"]]


def _matvec(x: Float[Array, "B I"], w: Float[Array, "O I"]) -> Float[Array, "B O"]:
    return jnp.einsum("bi,oi->bo", x.astype(w.dtype), w, preferred_element_type=jnp.float32)


def input_gates(tokens: Int[Array, " B"], embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"],
                table: Float[Array, "V G3"] | None = None) -> Float[Array, "B G3"]:
    """`W_ih · E[token]` (PyTorch gate order r, z, n), or a row of the precomputed table `E · W_ih^T`."""
    if table is not None:
        return jnp.take(table, tokens, axis=0).astype(jnp.float32)
    return _matvec(jnp.take(embed, tokens, axis=0), w_ih)


def gru_step(gi: Float[Array, "B G3"], h: Float[Array, "B G"], w_hh: Float[Array, "G3 G"]) -> Float[Array, "B G"]:
    """One `torch.nn.GRU(bias=False)` step: r, z = σ(W_i x + W_h h); n = tanh(W_in x + r ⊙ W_hn h);
    h' = (1 - z) ⊙ n + z ⊙ h."""
    gh = _matvec(h, w_hh)
    i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)
    r = jax.nn.sigmoid(i_r + h_r)
    z = jax.nn.sigmoid(i_z + h_z)
    n = jnp.tanh(i_n + r * h_n)
    return (1.0 - z) * n + z * h


def state_part(h: Float[Array, "B G"], w_s: Float[Array, "R G"]) -> Float[Array, "B R"]:
    return _matvec(h, w_s)


def correction_logits(pre: Float[Array, "B R"], w2: Float[Array, "V R"], base: Float[Array, "B V"]
                      ) -> Float[Array, "B V"]:
    """`base + W2 · SiLU(pre)` in float32, `pre` = W_z z + W_s h (the first projection, before its SiLU)."""
    mid = jax.nn.silu(pre.astype(jnp.float32)).astype(w2.dtype)
    return _matvec(mid, w2) + base.astype(jnp.float32)


def correction_argmax_reference(pre: Float[Array, "B R"], w2: Float[Array, "V R"], base: Float[Array, "B V"]
                                ) -> Int[Array, " B"]:
    return jnp.argmax(correction_logits(pre, w2, base), axis=-1).astype(jnp.int32)


def draft_loop(base: Float[Array, "B N V"], z_part: Float[Array, "B N R"], bonus: Int[Array, " B"],
               embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"], w_hh: Float[Array, "G3 G"],
               w_s: Float[Array, "R G"], w2: Float[Array, "V R"], *, prefix_len: int,
               corrected_choice: Callable[[Float[Array, "B R"], Float[Array, "B V"], int], Int[Array, " B"]],
               plain_choice: Choose, table: Float[Array, "V G3"] | None = None) -> Int[Array, "B N"]:
    """The sequential loop; `corrected_choice(pre, base_i, i)` picks a corrected draft, `plain_choice` a prefix one.

    N is small and static (the block size), so the loop is unrolled: rows below `prefix_len` skip the correction.
    """
    b, n = base.shape[:2]
    h = gru_step(input_gates(bonus, embed, w_ih, table), jnp.zeros((b, w_hh.shape[1]), jnp.float32), w_hh)
    drafts = []
    for i in range(n):
        if i < prefix_len:
            token = plain_choice(base[:, i].astype(jnp.float32), i)
        else:
            token = corrected_choice(z_part[:, i].astype(jnp.float32) + state_part(h, w_s), base[:, i], i)
        drafts.append(token)
        if i + 1 < n:
            h = gru_step(input_gates(token, embed, w_ih, table), h, w_hh)
    return jnp.stack(drafts, axis=1)


def greedy(logits: Float[Array, "B V"], i: int) -> Int[Array, " B"]:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def domino_draft_reference(base: Float[Array, "B N V"], z_part: Float[Array, "B N R"], bonus: Int[Array, " B"],
                           embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"], w_hh: Float[Array, "G3 G"],
                           w_s: Float[Array, "R G"], w2: Float[Array, "V R"], *, prefix_len: int,
                           choose: Choose = greedy, table: Float[Array, "V G3"] | None = None) -> Int[Array, "B N"]:
    """Drafts of the whole block with full-vocabulary corrected logits at every step (greedy or sampled)."""
    return draft_loop(base, z_part, bonus, embed, w_ih, w_hh, w_s, w2, prefix_len=prefix_len,
                      corrected_choice=lambda pre, base_i, i: choose(correction_logits(pre, w2, base_i), i),
                      plain_choice=choose, table=table)


def chunk_blocks(x: Float[Array, "... V"], k: int, chunk: int) -> Float[Array, "... C chunk"] | None:
    """The last axis cut into chunks of `chunk` entries (the last padded with -inf), or None when there are too few
    chunks for a chunked top-k to save anything (the caller then runs `lax.top_k`)."""
    v = x.shape[-1]
    num_chunks = -(-v // chunk)
    if k * chunk >= v or k >= num_chunks:
        return None
    pad = [(0, 0)] * (x.ndim - 1) + [(0, num_chunks * chunk - v)]
    return jnp.pad(x, pad, constant_values=-jnp.inf).reshape(*x.shape[:-1], num_chunks, chunk)


def chunked_top_k(x: Float[Array, "... V"], k: int, chunk: int = 64
                  ) -> tuple[Float[Array, "... k"], Int[Array, "... k"]]:
    """`lax.top_k` over the last axis, in two small passes: the k chunks (of `chunk` entries) with the highest maxima
    hold every top-k entry (a chunk holding one has a max above all but at most k - 1 entries, hence above all but
    k - 1 other chunks' maxima), so the exact top-k is taken among their k x chunk entries. On GPU a top-k with k
    past XLA's small-k kernel sorts the whole row; here the sorts are V / chunk and k x chunk long.
    Values match `lax.top_k`; ids too, up to the order of exactly tied values. Chunks of 64: 79 µs for a 1.5B block
    (15 rows x 151936, k = 64) on an H200 against 86 µs for 128 and 626 µs for `lax.top_k`
    (docs/results/2026-12-02-session15-h200.md).
    """
    blocks = chunk_blocks(x, k, chunk)
    if blocks is None:
        return jax.lax.top_k(x, k)
    v, lead = x.shape[-1], x.shape[:-1]
    _, best_chunks = jax.lax.top_k(jnp.max(blocks, axis=-1), k)  # [..., k]
    picked = jnp.take_along_axis(blocks, best_chunks[..., None], axis=-2).reshape(*lead, k * chunk)
    values, pos = jax.lax.top_k(picked, k)
    ids = jnp.take_along_axis(best_chunks, pos // chunk, axis=-1) * chunk + pos % chunk
    return values, jnp.minimum(ids, v - 1)  # a -inf pad entry is only picked when a row has < k finite values


def chunk_max_top_k(x: Float[Array, "... V"], k: int, chunk: int) -> tuple[Float[Array, "... k"], Int[Array, "... k"]]:
    """Approximate top-k: the best entry of each of the k chunks (of `chunk` entries) with the highest maxima, best
    first. It always holds the top entry, and misses exactly the top-k entries that share a chunk with a better one;
    it costs one sort of V / chunk maxima, where `chunked_top_k` sorts twice (on an H200, 15 rows x 151936, k = 32:
    31 µs with chunks of 128 against 62 µs, docs/results/2026-12-02-session16-h200.md). Shapes too small to chunk
    run `lax.top_k`."""
    blocks = chunk_blocks(x, k, chunk)
    if blocks is None:
        return jax.lax.top_k(x, k)
    v = x.shape[-1]
    values, best_chunks = jax.lax.top_k(jnp.max(blocks, axis=-1), k)
    inner = jnp.argmax(jnp.take_along_axis(blocks, best_chunks[..., None], axis=-2), axis=-1)
    return values, jnp.minimum(best_chunks * chunk + inner, v - 1)


def candidate_inputs(base: Float[Array, "B N V"], w2: Float[Array, "V R"], candidates: int, chunk: int = 0
                     ) -> tuple[Float[Array, "B N k"], Int[Array, "B N k"], Float[Array, "B N k R"]]:
    """Each draft row's `candidates` highest base logits (best first), their token ids and their W2 rows; `chunk`
    > 0 takes the approximate `chunk_max_top_k` instead (other drafts, never another output: verification decides)."""
    logits = base.astype(jnp.float32)
    cand_base, cand = chunk_max_top_k(logits, candidates, chunk) if chunk else chunked_top_k(logits, candidates)
    return cand_base, cand, jnp.take(w2, cand, axis=0)


def domino_draft_candidates_reference(base: Float[Array, "B N V"], z_part: Float[Array, "B N R"],
                                      bonus: Int[Array, " B"],
                            embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"], w_hh: Float[Array, "G3 G"],
                            w_s: Float[Array, "R G"], w2: Float[Array, "V R"], *, prefix_len: int, candidates: int,
                            choose: Choose = greedy, table: Float[Array, "V G3"] | None = None,
                            chunk: int = 0, stop: float = 0.0) -> Int[Array, "B N"]:
    """Drafts whose correction is computed for the `candidates` highest base logits of each row only (`chunk` > 0:
    the approximate candidates of `chunk_max_top_k`).

    A full-vocabulary step reads all of W2 (V × R) for every draft: on a small target that traffic is a large part
    of a decode step. Here each row's top-k base tokens and their W2 rows are gathered once per block, and draft i
    is chosen among them from `base + W2 · SiLU(pre)`, so a step reads k × R. With k = V the drafts equal
    `domino_draft_reference`'s (up to exact ties); any k keeps decoding lossless, since verification decides.
    `stop` > 0 (greedy only) stops the head early: `stopping_candidate_loop`.
    """
    cand_base, cand, cand_w2 = candidate_inputs(base, w2, candidates, chunk)
    if stop:
        if choose is not greedy:
            raise ValueError("an adaptive head stop needs greedy drafting (its confidence is the greedy choice's)")
        return stopping_candidate_loop(cand_base, cand, cand_w2, z_part, bonus, embed, w_ih, w_hh, w_s,
                                       prefix_len=prefix_len, stop=stop, table=table)

    def corrected(pre: Float[Array, "B R"], base_i: Float[Array, "B V"], i: int) -> Int[Array, " B"]:
        mid = jax.nn.silu(pre.astype(jnp.float32)).astype(w2.dtype)
        logits = jnp.einsum("bkr,br->bk", cand_w2[:, i], mid, preferred_element_type=jnp.float32) + cand_base[:, i]
        return jnp.take_along_axis(cand[:, i], choose(logits, i)[:, None], axis=1)[:, 0].astype(jnp.int32)

    return draft_loop(base, z_part, bonus, embed, w_ih, w_hh, w_s, w2, prefix_len=prefix_len,
                      corrected_choice=corrected, plain_choice=choose, table=table)


def candidate_confidence(scores: Float[Array, "B k"]) -> Float[Array, " B"]:
    """The best candidate's probability under a softmax over the row's candidates: 1 / Σ exp(score − max)."""
    return 1.0 / jnp.sum(jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True)), axis=-1)


def stopping_candidate_loop(cand_base: Float[Array, "B N k"], cand: Int[Array, "B N k"],
                            cand_w2: Float[Array, "B N k R"], z_part: Float[Array, "B N R"], bonus: Int[Array, " B"],
                            embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"], w_hh: Float[Array, "G3 G"],
                            w_s: Float[Array, "R G"], *, prefix_len: int, stop: float,
                            table: Float[Array, "V G3"] | None = None) -> Int[Array, "B N"]:
    """Greedy candidate drafting whose head stops once the block is unlikely to be accepted further.

    A running confidence starts at 1 and is multiplied, after each draft, by that draft's `candidate_confidence` (of
    the base candidates below `prefix_len`, of the corrected ones after). Once it falls below `stop`, every later
    draft of the row takes its base argmax, as the uncorrected prefix does, and the GRU need not step: a head step
    costs the same whether or not its draft is ever verified that deep. Drafts up to the stop equal the loop
    without one; decoding stays lossless either way.
    """
    b, n, _ = cand.shape
    pick = lambda scores, i: jnp.take_along_axis(  # noqa: E731  (ties: the earlier candidate, as argmax)
        cand[:, i], jnp.argmax(scores, axis=-1)[:, None], axis=1)[:, 0].astype(jnp.int32)
    h = gru_step(input_gates(bonus, embed, w_ih, table), jnp.zeros((b, w_hh.shape[1]), jnp.float32), w_hh)
    confidence, going = jnp.ones((b,), jnp.float32), jnp.ones((b,), bool)
    drafts = []
    for i in range(n):
        plain = cand_base[:, i].astype(jnp.float32)
        scores = plain
        if i >= prefix_len:
            mid = jax.nn.silu(z_part[:, i].astype(jnp.float32) + state_part(h, w_s)).astype(cand_w2.dtype)
            scores = jnp.einsum("bkr,br->bk", cand_w2[:, i], mid, preferred_element_type=jnp.float32) + plain
        token = jnp.where(going, pick(scores, i), pick(plain, i))
        confidence = jnp.where(going, confidence * candidate_confidence(scores), confidence)
        going = going & (confidence >= stop)
        drafts.append(token)
        if i + 1 < n:
            h = gru_step(input_gates(token, embed, w_ih, table), h, w_hh)
    return jnp.stack(drafts, axis=1)
