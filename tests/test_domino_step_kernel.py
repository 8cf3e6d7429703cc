"""Domino step kernels (Pallas interpret mode on CPU) vs the pure-JAX reference: the fused correction + vocabulary
argmax on random inputs with odd vocabulary sizes and ragged row counts, exact tie and -inf handling, the whole greedy
draft loop, and the platform dispatch."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels.domino_step import (correction_argmax, correction_argmax_reference, correction_logits, domino_draft,
                                        domino_draft_candidates)
from pallas_kernels.domino_step.gpu import correction_argmax_gpu
from pallas_kernels.domino_step import gpu_block
from pallas_kernels.domino_step.gpu_block import candidate_block_gpu
from pallas_kernels.domino_step.gpu_loop import candidate_loop_gpu
from pallas_kernels.domino_step.gpu_select import select_candidates_gpu
from pallas_kernels.domino_step.reference import (candidate_inputs, chunk_max_top_k, chunked_top_k,
                                                  domino_draft_candidates_reference, domino_draft_reference)
from pallas_kernels.domino_step.tpu import correction_argmax_tpu


@dataclasses.dataclass(frozen=True)
class Case:
    rows: int
    vocab: int
    rank: int
    dtype: str = "float32"
    block_v: int = 128


def make_inputs(case: Case, seed: int):
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    pre = jnp.asarray(rng.normal(size=(case.rows, case.rank)), dtype)
    w2 = jnp.asarray(rng.normal(size=(case.vocab, case.rank)) / np.sqrt(case.rank), dtype)
    base = jnp.asarray(rng.normal(size=(case.rows, case.vocab)), jnp.float32)
    return pre, w2, base


def assert_same_choice(got, pre, w2, base):
    """The kernel picked a maximal logit of the reference (up to float rounding of the dot), and exactly the
    reference's token wherever the top two are not a near-tie."""
    logits = np.asarray(correction_logits(pre, w2, base))
    got = np.asarray(got)
    assert got.shape == (logits.shape[0],) and got.dtype == np.int32
    top = np.sort(logits, axis=1)[:, -2:]
    chosen = logits[np.arange(len(got)), got]
    np.testing.assert_allclose(chosen, top[:, 1], rtol=0, atol=1e-4)
    clear = top[:, 1] - top[:, 0] > 1e-3
    assert clear.mean() > 0.8
    np.testing.assert_array_equal(got[clear], np.asarray(correction_argmax_reference(pre, w2, base))[clear])


GPU_CASES = [  # (case, splits): one and many tiles per chunk, partial last tile, >16 and >64 rows (row blocks)
    (Case(1, 1000, 32), None), (Case(3, 4099, 16, "bfloat16", 256), 3), (Case(20, 517, 64), 2),
    (Case(70, 301, 16), None), (Case(5, 50257, 32, "bfloat16", 512), 7)]


@pytest.mark.parametrize("case, splits", GPU_CASES, ids=str)
def test_gpu_kernel_matches_reference(case, splits):
    pre, w2, base = make_inputs(case, seed=case.vocab)
    got = correction_argmax_gpu(pre, w2, base, block_v=case.block_v, splits=splits, interpret=True)
    assert_same_choice(got, pre, w2, base)


TPU_CASES = [Case(1, 1000, 32, block_v=256), Case(20, 4099, 16, block_v=512), Case(3, 517, 64, "bfloat16"),
             Case(16, 50257, 32, "bfloat16", 4096)]


@pytest.mark.parametrize("case", TPU_CASES, ids=str)
def test_tpu_kernel_matches_reference(case):
    pre, w2, base = make_inputs(case, seed=case.vocab + 1)
    assert_same_choice(correction_argmax_tpu(pre, w2, base, block_v=case.block_v, interpret=True), pre, w2, base)


def test_tpu_kernel_under_tpu_interpreter():
    """DMA/VMEM simulation with NaN-filled uninitialised memory and race detection; rows and vocabulary ragged (the
    last row block and vocabulary tile read past the arrays)."""
    case = Case(20, 1000, 32, "bfloat16", 256)
    pre, w2, base = make_inputs(case, seed=9)
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan")
    assert_same_choice(correction_argmax_tpu(pre, w2, base, block_v=256, interpret=params), pre, w2, base)


def tied_base(vocab: int) -> np.ndarray:
    base = np.random.default_rng(0).integers(0, 3, size=(4, vocab)).astype(np.float32)
    base[1] = -np.inf
    base[1, [vocab - 5, 700, 3]] = [1.0, 2.0, 2.0]  # the tie at 3 and 700 spans tiles and chunks
    base[2] = -np.inf  # nothing finite: id 0, as jnp.argmax
    base[3, ::97] = 5.0
    return base


@pytest.mark.parametrize("flavour", ["gpu", "tpu"])
def test_ties_go_to_the_lowest_id(flavour):
    vocab = 1000
    base = jnp.asarray(tied_base(vocab))
    pre, w2 = jnp.ones((4, 16), jnp.float32), jnp.zeros((vocab, 16), jnp.float32)  # logits = base exactly
    expect = np.argmax(tied_base(vocab), axis=1)
    tuning = dict(block_v=128, splits=3) if flavour == "gpu" else dict(block_v=256)
    got = correction_argmax(pre, w2, base, platform=flavour, interpret=True, **tuning)
    np.testing.assert_array_equal(np.asarray(got), expect)
    np.testing.assert_array_equal(np.asarray(correction_argmax_reference(pre, w2, base)), expect)


def loop_inputs(seed: int, b=3, n=5, vocab=777, h=24, g=16, r=16):
    rng = np.random.default_rng(seed)

    def f(*shape, scale=1.0):
        return jnp.asarray(scale * rng.normal(size=shape), jnp.float32)

    return dict(base=f(b, n, vocab), z_part=f(b, n, r), bonus=jnp.asarray(rng.integers(0, vocab, b), jnp.int32),
                embed=f(vocab, h), w_ih=f(3 * g, h, scale=h**-0.5), w_hh=f(3 * g, g, scale=g**-0.5),
                w_s=f(r, g, scale=g**-0.5), w2=f(vocab, r, scale=2 * r**-0.5))


@pytest.mark.parametrize("flavour", ["gpu", "tpu"])
def test_draft_loop_with_kernel_equals_reference(flavour):
    args = loop_inputs(10)
    want = np.asarray(domino_draft_reference(**args, prefix_len=1))
    got = np.asarray(domino_draft(**args, prefix_len=1, platform=flavour, interpret=True, block_v=128))
    np.testing.assert_array_equal(got, want)
    # A precomputed input table E · W_ih^T is the same GRU input.
    table = jnp.einsum("vh,gh->vg", args["embed"], args["w_ih"])
    np.testing.assert_array_equal(np.asarray(domino_draft_reference(**args, prefix_len=1, table=table)), want)


@pytest.mark.parametrize("batch, dtype", [(1, "float32"), (3, "float32"), (2, "bfloat16")])
def test_candidate_loop_kernel_equals_reference(batch, dtype):
    """One fused call per draft (interpret mode) drafts what the XLA candidate loop drafts, greedy, with a table."""
    args = loop_inputs(20 + batch, b=batch, n=6, vocab=900, g=256, r=32)
    args = {k: v.astype(dtype) if v.dtype == jnp.float32 and k not in ("base", "z_part") else v
            for k, v in args.items()}
    table = jnp.einsum("vh,gh->vg", args["embed"], args["w_ih"], preferred_element_type=jnp.float32).astype(dtype)
    want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=1, candidates=32, table=table))
    got = domino_draft_candidates(**args, prefix_len=1, candidates=32, table=table, platform="gpu", fused="step",
                                  interpret=True)
    np.testing.assert_array_equal(np.asarray(got), want)
    # prefix_len 0 corrects the first draft too; the XLA path on other platforms is the reference itself.
    want0 = np.asarray(domino_draft_candidates_reference(**args, prefix_len=0, candidates=32, table=table))
    cand_base, cand, cand_w2 = candidate_inputs(args["base"], args["w2"], 32)
    got0 = candidate_loop_gpu(cand_base, cand, cand_w2, args["z_part"], args["bonus"], table, args["w_hh"],
                              args["w_s"], prefix_len=0, interpret=True)
    np.testing.assert_array_equal(np.asarray(got0), want0)
    assert not np.array_equal(want0, want)  # the corrected first draft differs somewhere: the test sees the head


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")
def test_candidate_loop_kernel_on_device():
    args = loop_inputs(31, b=2, n=16, vocab=151936, h=64, g=1024, r=256)
    args = {k: v.astype(jnp.bfloat16) if k not in ("base", "z_part", "bonus") else v for k, v in args.items()}
    table = jnp.einsum("vh,gh->vg", args["embed"], args["w_ih"], preferred_element_type=jnp.float32)
    table = table.astype(jnp.bfloat16)
    want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=1, candidates=64, table=table))
    got = np.asarray(domino_draft_candidates(**args, prefix_len=1, candidates=64, table=table, platform="gpu",
                                                fused="step"))
    assert (got == want).mean() > 0.9  # bf16: a near-tie may resolve differently, and then the rest of the row too


H200 = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=132, platform="gpu")


def candidate_kernel_ir(fn, drafts: int) -> str:
    """`fn` (a candidate-loop kernel wrapper) lowered for an abstract H200 at the Qwen2.5-1.5B head's shapes
    (G 1024, R 256, k 64, batch 1, bf16 weights): the module text with the Triton IR of its Pallas calls."""
    s = jax.ShapeDtypeStruct
    b, n, k, r, g, vocab = 1, drafts, 64, 256, 1024, 151936
    args = (s((b, n, k), jnp.float32), s((b, n, k), jnp.int32), s((b, n, k, r), jnp.bfloat16),
            s((b, n, r), jnp.float32), s((b,), jnp.int32), s((vocab, 3 * g), jnp.bfloat16),
            s((3 * g, g), jnp.bfloat16), s((r, g), jnp.bfloat16))
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=H200)):
        lowered = jax.jit(fn, static_argnames=("prefix_len",)).trace(*args, prefix_len=1)
        return lowered.lower(lowering_platforms=("cuda",)).as_text()


def test_candidate_loop_kernel_lowers_for_h200():
    """One kernel per draft (15 drafts) lowers to Triton IR for an abstract H200."""
    assert "domino_candidate_step" in candidate_kernel_ir(candidate_loop_gpu, drafts=15)


def block_case(seed: int, dtype: str, **shape):
    args = loop_inputs(seed, **shape)
    args = {k: v.astype(dtype) if v.dtype == jnp.float32 and k not in ("base", "z_part") else v
            for k, v in args.items()}
    table = jnp.einsum("vh,gh->vg", args["embed"], args["w_ih"], preferred_element_type=jnp.float32).astype(dtype)
    return args, table


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_candidate_block_kernel_equals_reference(dtype):
    """The persistent block kernel's step code, interpreted as one launch per draft, drafts what the XLA candidate
    loop drafts, with and without an uncorrected first draft."""
    args, table = block_case(41, dtype, b=1, n=7, vocab=900, g=256, r=32)
    drafts = {}
    for prefix_len in (1, 0):
        want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=prefix_len, candidates=32, table=table))
        got = domino_draft_candidates(**args, prefix_len=prefix_len, candidates=32, table=table, platform="gpu",
                                      fused="block", interpret=True)
        np.testing.assert_array_equal(np.asarray(got), want)
        drafts[prefix_len] = want
    assert not np.array_equal(drafts[0], drafts[1])  # the corrected first draft differs: the test sees the head
    # Approximate candidates (chunks of 8 of the 900 tokens) reach the kernel the same way.
    want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=1, candidates=32, table=table, chunk=8))
    got = domino_draft_candidates(**args, prefix_len=1, candidates=32, table=table, platform="gpu", fused="block",
                                  interpret=True, chunk=8)
    np.testing.assert_array_equal(np.asarray(got), want)
    assert not np.array_equal(want, drafts[1])  # other candidates, other drafts somewhere
    cand_base, cand, cand_w2 = candidate_inputs(args["base"], args["w2"], 32)
    _, gave_up = candidate_block_gpu(cand_base, cand, cand_w2, args["z_part"], args["bonus"], table, args["w_hh"],
                                     args["w_s"], prefix_len=1, persistent=False, interpret=True)
    assert int(gave_up) == 0


def test_candidate_block_kernel_takes_only_what_it_can_run():
    assert gpu_block.block_rows(1024, 256, 132) == 32  # the 1.5B's head: 104 programs, one per SM
    assert "SMs" in gpu_block.unsupported(1, 64, 256, 1024, num_sms=8)
    assert "batch" in gpu_block.unsupported(2, 64, 256, 1024)
    assert "rank" in gpu_block.unsupported(1, 64, 24, 1024)
    # Batch 2 is not the kernel's: the XLA loop drafts it.
    args, table = block_case(42, "float32", b=2, n=5, vocab=700, g=256, r=32)
    want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=1, candidates=32, table=table))
    got = domino_draft_candidates(**args, prefix_len=1, candidates=32, table=table, platform="gpu", fused="block",
                                  interpret=True)
    np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(ValueError, match="fused must be"):
        domino_draft_candidates(**args, prefix_len=1, candidates=32, table=table, fused="persistent")
    args, table = block_case(43, "float32", b=1, n=4, vocab=700, g=256, r=32)
    cand_base, cand, cand_w2 = candidate_inputs(args["base"], args["w2"], 32)
    with pytest.raises(ValueError, match="interpreter"):
        candidate_block_gpu(cand_base, cand, cand_w2, args["z_part"], args["bonus"], table, args["w_hh"],
                            args["w_s"], prefix_len=1, persistent=True, interpret=True)


def test_candidate_block_kernel_lowers_for_h200():
    """The persistent kernel (grid barrier included) at the 1.5B's head shapes lowers to Triton IR for an H200."""
    text = candidate_kernel_ir(candidate_block_gpu, drafts=16)
    assert "domino_candidate_block" in text and "atomic_rmw" in text


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")
def test_candidate_block_kernel_on_device():
    """The persistent kernel with its grid barrier, at the 1.5B's head shapes on several inputs: no program gives up
    waiting, and the drafts equal those of the same step code launched once per draft (no barrier), exactly: both
    run the same arithmetic, so any difference is a synchronisation bug. Against the XLA loop, bf16 near-ties may
    flip a token (and then the rest of the block), so that agreement is only checked on average."""
    agree = []
    for seed in range(4):
        args, table = block_case(50 + seed, "bfloat16", b=1, n=16, vocab=151936, h=64, g=1024, r=256)
        cand_base, cand, cand_w2 = candidate_inputs(args["base"], args["w2"], 64)
        block_args = (cand_base, cand, cand_w2, args["z_part"], args["bonus"], table, args["w_hh"], args["w_s"])
        got, gave_up = candidate_block_gpu(*block_args, prefix_len=1, sms=gpu_block.num_sms())
        stepwise, _ = candidate_block_gpu(*block_args, prefix_len=1, sms=gpu_block.num_sms(), persistent=False)
        assert int(gave_up) == 0
        np.testing.assert_array_equal(np.asarray(got), np.asarray(stepwise))
        want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=1, candidates=64, table=table))
        agree.append(np.mean(np.asarray(got) == want))
    assert np.mean(agree) > 0.8


def test_dispatch_falls_back_to_the_reference():
    pre, w2, base = make_inputs(Case(2, 300, 24), seed=11)  # rank 24: not a Triton block shape
    want = np.asarray(correction_argmax_reference(pre, w2, base))
    np.testing.assert_array_equal(np.asarray(correction_argmax(pre, w2, base, platform="gpu", interpret=True)), want)
    np.testing.assert_array_equal(np.asarray(correction_argmax(pre, w2, base, platform="reference")), want)
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(correction_argmax(pre, w2, base)), want)


@pytest.mark.parametrize("flavour", ["gpu", "tpu"])
@pytest.mark.parametrize("rows, dtype", [(1, "bfloat16"), (20, "float32")])
def test_kernels_lower_for_h200_and_tpu(flavour, rows, dtype):
    """Qwen3 head shapes lower to Triton IR for an (abstract) H200 and to Mosaic for TPU, with no device here."""
    pre, base = jax.ShapeDtypeStruct((rows, 256), jnp.float32), jax.ShapeDtypeStruct((rows, 151936), jnp.float32)
    w2 = jax.ShapeDtypeStruct((151936, 256), jnp.dtype(dtype))
    fn = correction_argmax_gpu if flavour == "gpu" else correction_argmax_tpu
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=H200 if flavour == "gpu" else None)
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = jax.jit(fn).trace(pre, w2, base).lower(lowering_platforms=("cuda" if flavour == "gpu" else "tpu",))
    assert "domino_correction_argmax" in lowered.as_text()


@pytest.mark.skipif(jax.default_backend() not in ("gpu", "tpu"), reason="needs a GPU or TPU")
@pytest.mark.parametrize("case", [Case(1, 151936, 256, "bfloat16"), Case(16, 151936, 256, "bfloat16"),
                                  Case(4, 50257, 256)], ids=str)
def test_kernel_on_device(case):
    pre, w2, base = make_inputs(case, seed=12)
    assert_same_choice(correction_argmax(pre, w2, base), pre, w2, base)


@pytest.mark.parametrize("shape,k,chunk", [((3, 1000), 8, 16), ((2, 4, 777), 5, 32), ((1, 300), 40, 16),
                                           ((2, 64), 4, 128)])
def test_chunked_top_k_equals_lax_top_k(shape, k, chunk):
    x = jax.random.normal(jax.random.key(sum(shape)), shape, jnp.float32)
    x = x.at[..., -1].set(50.0)  # the best entry in the ragged last chunk
    got_values, got_ids = chunked_top_k(x, k, chunk)
    want_values, want_ids = jax.lax.top_k(x, k)
    np.testing.assert_array_equal(np.asarray(got_values), np.asarray(want_values))
    np.testing.assert_array_equal(np.asarray(got_ids), np.asarray(want_ids))


def test_chunked_top_k_with_masked_entries_returns_valid_ids():
    x = jnp.full((2, 500), -jnp.inf).at[:, :3].set(jnp.array([1.0, 3.0, 2.0]))  # fewer finite values than k
    values, ids = chunked_top_k(x, 6, chunk=16)
    np.testing.assert_array_equal(np.asarray(ids[:, :3]), [[1, 2, 0]] * 2)
    assert int(ids.max()) < 500 and np.all(np.isneginf(np.asarray(values[:, 3:])))


@pytest.mark.parametrize("shape,k,chunk", [((3, 1000), 8, 16), ((2, 4, 777), 5, 32)])
def test_chunk_max_top_k_takes_the_best_of_the_best_chunks(shape, k, chunk):
    x = np.array(jax.random.normal(jax.random.key(sum(shape)), shape, jnp.float32))
    x[..., -1] = 50.0  # the best entry in the ragged last chunk
    values, ids = map(np.asarray, chunk_max_top_k(jnp.asarray(x), k, chunk))
    flat, flat_ids, flat_values = x.reshape(-1, shape[-1]), ids.reshape(-1, k), values.reshape(-1, k)
    for row, got_ids, got_values in zip(flat, flat_ids, flat_values):
        padded = np.concatenate([row, np.full(-len(row) % chunk, -np.inf)]).reshape(-1, chunk)
        best = np.argsort(-padded.max(axis=1), kind="stable")[:k]  # the k chunks with the highest maxima
        np.testing.assert_array_equal(got_ids, best * chunk + padded[best].argmax(axis=1))
        np.testing.assert_array_equal(got_values, row[got_ids])
        assert got_ids[0] == row.argmax() and np.all(np.diff(got_values) <= 0)  # the top entry first, best first


def test_chunk_max_top_k_misses_only_a_chunk_s_second_best():
    x = jnp.zeros((1, 64)).at[0, jnp.array([3, 5, 20, 40])].set(jnp.array([9.0, 8.0, 7.0, 6.0]))
    _, ids = chunk_max_top_k(x, 3, chunk=8)
    np.testing.assert_array_equal(np.asarray(ids), [[3, 20, 40]])  # 5 shares 3's chunk
    _, exact = chunked_top_k(x, 3, chunk=8)
    np.testing.assert_array_equal(np.asarray(exact), [[3, 5, 20]])
    # Too few chunks for k: the exact top-k.
    np.testing.assert_array_equal(np.asarray(chunk_max_top_k(x, 3, chunk=32)[1]), [[3, 5, 20]])


def sorted_by_id(values, ids):
    order = np.argsort(np.asarray(ids), axis=-1)
    return np.take_along_axis(np.asarray(values), order, -1), np.take_along_axis(np.asarray(ids), order, -1)


@pytest.mark.parametrize("shape,k,chunk,ties", [((3, 4096), 16, 64, False), ((2, 5000), 8, 32, False),
                                                ((4, 3000), 16, 16, True)])
def test_select_kernel_picks_the_xla_selection(shape, k, chunk, ties):
    """The sort-free selection kernel (interpret mode) returns, in id order, the set `lax.top_k` returns (exact; ties
    to the lower id, on integer-valued logits full of ties) and the set `chunk_max_top_k` returns (approximate), with
    those tokens' W2 rows."""
    x = jax.random.normal(jax.random.key(sum(shape) + k), shape, jnp.float32) * 3
    x = jnp.round(x) if ties else x.at[:, -1].set(50.0)  # ragged last chunk holds the best entry
    w2 = jax.random.normal(jax.random.key(1), (shape[1], 16), jnp.bfloat16)
    for exact, xla in ((True, jax.lax.top_k(x, k)), (False, chunk_max_top_k(x, k, chunk))):
        values, ids, cand_w2 = select_candidates_gpu(x, w2, k=k, chunk=chunk, exact=exact, interpret=True)
        assert np.all(np.diff(np.asarray(ids), axis=-1) > 0)  # id order
        want_values, want_ids = sorted_by_id(*xla)
        np.testing.assert_array_equal(np.asarray(ids), want_ids)
        np.testing.assert_array_equal(np.asarray(values), want_values)
        np.testing.assert_array_equal(np.asarray(cand_w2), np.asarray(w2)[want_ids])


def test_select_kernel_declines_what_it_cannot_hold():
    from pallas_kernels.domino_step.gpu_select import unsupported

    assert unsupported(151936, 32, 64, 256) is None and unsupported(151936, 32, 128, 256) is None
    assert "more than" in unsupported(900, 32, 64, 256)  # fewer chunks than candidates
    assert "powers of two" in unsupported(4096, 24, 64, 256) and "powers of two" in unsupported(4096, 16, 64, 48)
    assert "exceed" in unsupported(151936, 32, 16, 256)  # 9496 chunk maxima for one program


def test_head_stop_keeps_drafts_up_to_the_stop_then_takes_the_base_argmax():
    """The adaptive head stop (XLA loop): a threshold near 0 drafts what the loop without one drafts, one near 1
    keeps only the first draft and takes each later row's base argmax, and in between every row is the unstopped
    drafts up to some point and base argmaxes after it, that point moving later as the threshold falls."""
    args, table = block_case(43, "float32", b=3, n=8, vocab=900, g=256, r=32)
    kw = dict(prefix_len=1, candidates=32, table=table)
    full = np.asarray(domino_draft_candidates_reference(**args, **kw))
    plain = np.asarray(jnp.argmax(args["base"], axis=-1))
    np.testing.assert_array_equal(np.asarray(domino_draft_candidates_reference(**args, **kw, stop=1e-30)), full)
    nearly_one = np.asarray(domino_draft_candidates_reference(**args, **kw, stop=0.999999))
    np.testing.assert_array_equal(nearly_one[:, 1:], plain[:, 1:])
    np.testing.assert_array_equal(nearly_one[:, 0], full[:, 0])
    assert not np.array_equal(full[:, 1:], plain[:, 1:])  # the head changes some draft: the cases differ

    def kept(drafts):
        """Per row, the number of leading drafts that can be the unstopped ones, the rest being base argmaxes."""
        out = []
        for row, want, base in zip(drafts, full, plain):
            ks = [k for k in range(1, len(row) + 1)
                  if np.array_equal(row[:k], want[:k]) and np.array_equal(row[k:], base[k:])]
            assert ks, (row, want, base)
            out.append(max(ks))
        return np.array(out)

    stops = (0.9, 0.5, 0.2, 0.05, 0.01, 1e-3, 1e-5)
    lengths = [kept(np.asarray(domino_draft_candidates_reference(**args, **kw, stop=s))) for s in stops]
    assert all(np.all(a <= b) for a, b in zip(lengths, lengths[1:]))
    assert any(np.any((1 < x) & (x < args["base"].shape[1])) for x in lengths)  # some row stops mid-block


def test_candidate_block_kernel_stops_like_the_reference():
    """With the adaptive stop, the block kernel's step code (interpreted, one launch per draft) drafts what the
    XLA loop drafts: it ends its loop at the same draft and leaves the base argmaxes after it. On this case the
    three thresholds stop after drafts 1, 2 and 3 of 8."""
    args, table = block_case(47, "bfloat16", b=1, n=8, vocab=900, g=256, r=32)
    kw = dict(prefix_len=1, candidates=32, table=table)
    seen = {tuple(np.asarray(domino_draft_candidates_reference(**args, **kw))[0])}
    for stop in (0.5, 0.05, 1e-3):
        want = np.asarray(domino_draft_candidates_reference(**args, **kw, stop=stop))
        got = domino_draft_candidates(**args, **kw, platform="gpu", fused="block", interpret=True, stop=stop)
        np.testing.assert_array_equal(np.asarray(got), want)
        seen.add(tuple(want[0]))
    assert len(seen) == 4  # each threshold stops elsewhere, and none drafts the whole block through the head


def test_head_stop_errors():
    args, table = block_case(43, "float32", b=1, n=4, vocab=900, g=256, r=32)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        domino_draft_candidates(**args, prefix_len=1, candidates=32, table=table, stop=1.0)
    with pytest.raises(ValueError, match="greedy"):
        domino_draft_candidates(**args, prefix_len=1, candidates=32, table=table, stop=0.1,
                                choose=lambda logits, i: jnp.argmax(logits, axis=-1))


def test_block_kernel_with_the_select_kernel_equals_reference():
    """On a vocabulary the selection kernel takes (4096 tokens, 16 candidates), the GPU block path (both kernels
    interpreted) drafts what the XLA candidate loop drafts, exactly and approximately."""
    args, table = block_case(61, "float32", b=1, n=6, vocab=4096, g=256, r=32)
    for chunk in (0, 128):
        want = np.asarray(domino_draft_candidates_reference(**args, prefix_len=1, candidates=16, table=table,
                                                            chunk=chunk))
        got = domino_draft_candidates(**args, prefix_len=1, candidates=16, table=table, platform="gpu",
                                      fused="block", interpret=True, chunk=chunk)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_select_kernel_lowers_for_h200():
    """At the 1.5B's block (15 rows x 151936, k = 32), exact and approximate, for an abstract H200."""
    for exact, chunk in ((True, 64), (False, 128)):
        fn = functools.partial(select_candidates_gpu, k=32, chunk=chunk, exact=exact)
        args = (jax.ShapeDtypeStruct((15, 151936), jnp.float32), jax.ShapeDtypeStruct((151936, 256), jnp.bfloat16))
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=H200)):
            text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert "domino_select_candidates" in text
    # The GPU block path end to end: selection kernel, then the persistent head kernel.
    s = jax.ShapeDtypeStruct
    n, k, r, g, h, vocab = 15, 32, 256, 1024, 1536, 151936
    args = dict(base=s((1, n, vocab), jnp.float32), z_part=s((1, n, r), jnp.float32), bonus=s((1,), jnp.int32),
                embed=s((vocab, h), jnp.bfloat16), w_ih=s((3 * g, h), jnp.bfloat16), w_hh=s((3 * g, g), jnp.bfloat16),
                w_s=s((r, g), jnp.bfloat16), w2=s((vocab, r), jnp.bfloat16), table=s((vocab, 3 * g), jnp.bfloat16))
    for stop in (0.0, 0.05):  # with the adaptive stop, the kernel's loop is a while loop with the barrier inside
        fn = functools.partial(domino_draft_candidates, prefix_len=1, candidates=k, platform="gpu", fused="block",
                               stop=stop)
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=H200)):
            text = jax.jit(lambda a: fn(**a)).trace(args).lower(lowering_platforms=("cuda",)).as_text()
        assert "domino_select_candidates" in text and "domino_candidate_block" in text
