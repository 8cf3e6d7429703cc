"""Token Recycling adjacency: the fused top-k kernels (interpret mode) vs `jax.lax.top_k`, the deterministic update,
BFS retrieval over static templates, and the table file format."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from jspec.errors import UserError
from jspec.retrieval import adjacency
from jspec.retrieval.templates import Template, template
from pallas_kernels.adjacency_update import kernel, topk_indices, topk_reference

K = 8


def distinct_logits(seed: int, rows: int, vocab: int) -> jax.Array:
    """Distinct float32 values (a permutation of integers, exact in float32), so the top-k has no ties."""
    keys = jax.random.split(jax.random.key(seed), rows)
    return jnp.stack([jax.random.permutation(k, vocab) for k in keys]).astype(jnp.float32) * 0.25 - vocab / 8


def stable_topk(x: np.ndarray, k: int) -> np.ndarray:
    """Descending values, ties to the lower id."""
    return np.argsort(-x.astype(np.float32), axis=1, kind="stable")[:, :k]


GPU_CASES = [  # (rows, vocab, block_v, splits): one and many tiles per chunk, uneven chunks, a partial last tile
    (5, 1000, 256, None), (5, 1000, 128, 1), (3, 49157, 2048, None), (2, 49157, 4096, 3)]


@pytest.mark.parametrize("rows, vocab, block_v, splits", GPU_CASES)
def test_gpu_kernel_matches_reference(rows, vocab, block_v, splits):
    x = distinct_logits(rows + vocab, rows, vocab)
    got = kernel.topk_gpu(x, k=K, block_v=block_v, splits=splits, interpret=True)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(topk_reference(x, K)))


@pytest.mark.parametrize("rows, vocab, block_rows, block_v", [(5, 1000, 16, 256), (20, 49157, 16, 4096)])
def test_tpu_kernel_matches_reference(rows, vocab, block_rows, block_v):
    x = distinct_logits(rows * vocab, rows, vocab)
    got = kernel.topk_tpu(x, k=K, block_rows=block_rows, block_v=block_v, interpret=True)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(topk_reference(x, K)))


def test_tpu_kernel_under_tpu_interpreter():
    """DMA/VMEM simulation with NaN-filled uninitialised memory and race detection; rows and vocab both ragged."""
    x = distinct_logits(7, 20, 1000).astype(jnp.bfloat16)  # bf16 rounding creates ties: lower id must win
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan")
    got = kernel.topk_tpu(x, k=K, block_rows=16, block_v=256, interpret=params)
    np.testing.assert_array_equal(np.asarray(got), stable_topk(np.asarray(x), K))


def tied_logits() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, size=(4, 700)).astype(np.float32)  # ~230 copies of each value
    x[1] = -np.inf
    x[1, [650, 3, 400]] = [1.0, 1.0, 2.0]  # three finite values, then -inf ties at the lowest ids
    x[2, ::7] = 5.0  # ties spread over every tile
    x[3] = 0.0
    return x


@pytest.mark.parametrize("flavour", ["gpu", "tpu"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_ties_go_to_the_lower_id(flavour, dtype):
    x = jnp.asarray(tied_logits(), dtype)
    expect = stable_topk(tied_logits(), K)
    np.testing.assert_array_equal(np.asarray(topk_reference(x, K)), expect)  # the rule is lax.top_k's
    got = topk_indices(x, K, platform=flavour, interpret=True)
    np.testing.assert_array_equal(np.asarray(got), expect)
    if flavour == "gpu":  # ties spread over several vocabulary chunks: the cross-chunk merge keeps the lower id
        got = kernel.topk_gpu(x, k=K, block_v=128, splits=3, interpret=True)
        np.testing.assert_array_equal(np.asarray(got), expect)


def test_signed_zero_and_nan_follow_lax_top_k():
    x = jnp.array([[-0.0, 0.0, -0.0, 0.0, -1.0, -1.0, -2.0, -3.0, -4.0, -5.0] + [-9.0] * 250,
                   [1.0, jnp.nan, 2.0, jnp.inf, -jnp.inf, 0.0, -0.0, 3.0, 4.0, 5.0] + [-9.0] * 250])
    for flavour in ("gpu", "tpu"):
        got = topk_indices(x, K, platform=flavour, interpret=True)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(topk_reference(x, K)))


def test_unsupported_shapes_fall_back_to_the_reference():
    x = distinct_logits(1, 2, 6)  # fewer ids than k
    np.testing.assert_array_equal(np.asarray(topk_indices(x, 4, platform="gpu", interpret=True)),
                                  np.asarray(topk_reference(x, 4)))
    x = distinct_logits(2, 2, 100)
    np.testing.assert_array_equal(np.asarray(topk_indices(x, 6, platform="gpu", interpret=True)),  # k not 2^n
                                  np.asarray(topk_reference(x, 6)))


@pytest.mark.parametrize("use_kernel", [False, True])
def test_update_last_valid_duplicate_wins(use_kernel):
    vocab, b, n = 300, 2, 6
    logits = distinct_logits(3, b * n, vocab).reshape(b, n, vocab)
    tokens = jnp.array([[5, 7, 5, 9, 11, 13],
                        [7, 20, 5, 21, 22, -1]])
    valid = jnp.array([[True, True, True, True, True, True],
                       [True, True, True, True, False, True]])
    tokens = tokens.at[1, 4].set(5)  # an invalid occurrence after the last valid 5: must not win
    marker = jnp.full((vocab, K), 99, jnp.int32)
    adj = adjacency.update(adjacency.Adjacency(marker), tokens, valid, logits, use_kernel=use_kernel)
    top = np.asarray(topk_reference(logits.reshape(b * n, vocab), K)).reshape(b, n, K)
    table = np.asarray(adj.table)
    winners = {5: (1, 2), 7: (1, 0), 9: (0, 3), 11: (0, 4), 13: (0, 5), 20: (1, 1), 21: (1, 3)}
    for token, (bi, ni) in winners.items():
        np.testing.assert_array_equal(table[token], top[bi, ni], err_msg=f"row of token {token}")
    untouched = np.setdiff1d(np.arange(vocab), list(winners))
    assert (table[untouched] == 99).all()  # includes row 22 (invalid node) and the last row (token -1 is skipped)
    ref = adjacency.update_reference(adjacency.Adjacency(marker), tokens, valid, logits)
    np.testing.assert_array_equal(table, np.asarray(ref.table))


def test_update_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="do not match"):
        adjacency.update(adjacency.init(100), jnp.zeros((1, 3), jnp.int32), jnp.ones((1, 3), bool),
                         jnp.zeros((1, 3, 99)))


def test_init_and_reset():
    adj = adjacency.init(50)
    assert adj.table.shape == (50, 8) and adj.table.dtype == jnp.int32 and not adj.table.any()
    hot = adjacency.Adjacency(adj.table + 3)
    assert not adjacency.reset(hot).table.any()
    assert jax.tree.leaves(hot)[0] is hot.table  # a pytree: carried through jit / while_loop


def test_retrieve_hand_built():
    # token t's successors: rank 0 -> t+1, rank 1 -> t+2, rank 2 -> 2t (mod 10)
    table = jnp.array([[(t + 1) % 10, (t + 2) % 10, (2 * t) % 10] for t in range(10)], jnp.int32)
    adj = adjacency.Adjacency(table)
    #        root  [0]  [1]  [0,0] [0,2] [1,0] [0,0,1]
    parents = [-1, 0, 0, 1, 1, 2, 3]
    ranks = [0, 0, 1, 0, 2, 0, 1]
    got = adjacency.retrieve(adj, jnp.array([3, 7]), np.array(parents), np.array(ranks))
    np.testing.assert_array_equal(np.asarray(got), [[3, 4, 5, 5, 8, 6, 7],
                                                    [7, 8, 9, 9, 6, 0, 1]])


@pytest.mark.parametrize("name", ["tr-2.2.2", "tr-60"])
def test_retrieve_follows_the_template(name):
    t = template(name)
    table = jax.random.randint(jax.random.key(0), (500, K), 0, 500)
    roots = jnp.array([1, 42, 499])
    got = np.asarray(jax.jit(lambda a, r: adjacency.retrieve(a, r, t.parents, t.ranks))(
        adjacency.Adjacency(table), roots))
    table = np.asarray(table)
    assert got.shape == (3, t.size)
    for i in range(1, t.size):
        np.testing.assert_array_equal(got[:, i], table[got[:, t.parents[i]], t.ranks[i]])
    np.testing.assert_array_equal(got[:, 0], roots)


def test_template_shapes():
    full, short = template("tr-2.2.2"), template("tr-60")
    assert full.size == 81 and full.widths == (8, 21, 25, 15, 8, 3)
    assert short.size == 60 and short.widths == (8, 21, 25, 5)
    for name in ("parents", "ranks", "depths"):
        np.testing.assert_array_equal(getattr(short, name), getattr(full, name)[:60])
    assert full.ranks[1:9].tolist() == list(range(8))  # level 1: every successor of the root
    assert full.ranks.max() < K and full.depths.max() == 6
    with pytest.raises(UserError, match="unknown template"):
        template("tr-9")


@pytest.mark.parametrize("parents, ranks, match", [
    ([-1, 2, 0], [0, 0, 0], "precede"),
    ([-1, 0, 0], [0, 0, 8], "ranks"),
    ([-1, 0, 1, 0], [0, 0, 0, 1], "BFS"),
    ([0, 0], [0, 0], "root"),
])
def test_template_validation(parents, ranks, match):
    with pytest.raises(ValueError, match=match):
        Template.from_parents(np.array(parents), np.array(ranks))


def test_save_load_round_trip(tmp_path):
    adj = adjacency.Adjacency(jax.random.randint(jax.random.key(1), (300, K), 0, 300))
    path = tmp_path / "adj.npz"
    adjacency.save(adj, path)
    back = adjacency.load(path, vocab_size=300, k=K)
    np.testing.assert_array_equal(np.asarray(back.table), np.asarray(adj.table))
    assert back.table.dtype == jnp.int32
    assert not (tmp_path / "adj.npz.tmp").exists()


def test_load_errors(tmp_path):
    path = tmp_path / "adj.npz"
    adjacency.save(adjacency.init(300), path)
    with pytest.raises(UserError, match="vocabulary of 300 tokens, but the model has 151936"):
        adjacency.load(path, vocab_size=151936)
    with pytest.raises(UserError, match="expected k=4"):
        adjacency.load(path, k=4)
    with pytest.raises(UserError, match="not found"):
        adjacency.load(tmp_path / "missing.npz")
    data = path.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.npz").write_bytes(b"not a zip file at all")
    np.savez(tmp_path / "other.npz", table=np.zeros((3, 8), np.int32))
    for name in ("truncated.npz", "garbage.npz", "other.npz"):
        with pytest.raises(UserError, match="not a readable jspec adjacency file"):
            adjacency.load(tmp_path / name)
    bad = dict(np.load(path))
    bad["table"] = np.full((300, K), 300, np.int32)  # ids outside the vocabulary
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(UserError, match="corrupt"):
        adjacency.load(tmp_path / "bad.npz")
