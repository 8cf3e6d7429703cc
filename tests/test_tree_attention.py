"""Tree attention: reference vs the decoder's dense attention, and both Pallas kernels vs the reference.

On CPU the kernels run in Pallas interpret mode (the TPU kernel also under the TPU simulator's race detector); on a
GPU/TPU the `*_on_device` tests run the compiled kernel. Every case draws fresh random inputs; each batch row gets
its own start (0, 1, 37, S - T) and some rows end in padded (invalid) tree slots.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from jspec.models.cache import BlockMask, causal_block_mask
from pallas_kernels.tree_attention import choose_kernel, tree_attention, tree_attention_reference
from pallas_kernels.tree_attention.gpu import default_layout, default_num_splits, tree_attention_gpu
from pallas_kernels.tree_attention.testing import Case, random_tree_masks
from pallas_kernels.tree_attention.tpu import tree_attention_tpu


CASES = [
    Case(7, 4, 4, 64),  # H = K
    Case(16, 8, 2, 128, "bfloat16"),  # GQA 4:1
    Case(60, 12, 2, 128, "bfloat16"),  # Qwen2.5-1.5B heads, a 60-node tree
    Case(1, 9, 3, 64),  # SmolLM2 heads, decode
    Case(1, 12, 2, 128, "bfloat16", cache_len=512),
    Case(60, 9, 3, 64, cache_len=384),
    Case(16, 2, 2, 128, cache_len=512),
]
TOL = {"float32": 1e-5, "bfloat16": 2e-2}


def make_inputs(case: Case, seed: int, nan_beyond_tree: bool = False):
    """Rows start at 0, 1, 37 and S - T; the last two rows have padded tree slots."""
    rng = np.random.default_rng(seed)
    starts = np.array([0, 1, 37, case.cache_len - case.t], np.int32)
    n_valid = [case.t, case.t, max(1, case.t - 3), max(1, case.t // 2)]
    block = random_tree_masks(rng, len(starts), case.t, n_valid)
    dtype = jnp.dtype(case.dtype)
    q = rng.standard_normal((len(starts), case.t, case.heads, case.head_dim))
    k, v = rng.standard_normal((2, len(starts), case.cache_len, case.kv_heads, case.head_dim))
    if nan_beyond_tree:  # slots from start + T on must never reach the output
        beyond = np.arange(case.cache_len)[None, :] >= (starts + case.t)[:, None]
        k[beyond], v[beyond] = np.nan, np.nan
    return (jnp.asarray(q, dtype), jnp.asarray(k, dtype), jnp.asarray(v, dtype), jnp.asarray(starts),
            jnp.asarray(block))


def assert_close(out, ref, dtype: str):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref, rtol=TOL[dtype], atol=TOL[dtype])


def attend(q, k, v, mask):
    """Independent oracle: plain softmax attention under a dense [B, T, S] mask."""
    b, t, h, d = q.shape
    rep = h // k.shape[2]
    kf, vf = jnp.repeat(k, rep, axis=2).astype(jnp.float32), jnp.repeat(v, rep, axis=2).astype(jnp.float32)
    scores = jnp.einsum("bthd,bshd->bhts", q.astype(jnp.float32), kf) * d**-0.5
    probs = jax.nn.softmax(jnp.where(mask[:, None], scores, -1e30), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", probs, vf).astype(q.dtype)


@pytest.mark.parametrize("case", CASES[:4], ids=str)
def test_reference_matches_dense_attention(case):
    q, k, v, start, block = make_inputs(case, seed=1)
    ref = tree_attention_reference(q, k, v, start, block)
    dense = attend(q, k, v, BlockMask(start, block).dense(case.cache_len))
    valid = np.asarray(BlockMask(start, block).valid)  # attend gives invalid rows a uniform average, not zeros
    assert_close(ref[valid], dense[valid], case.dtype)


def test_reference_prefill_is_causal_attention():
    q, k, v, _, _ = make_inputs(Case(16, 4, 2, 64, cache_len=16), seed=2)
    start = jnp.zeros((4,), jnp.int32)
    mask = causal_block_mask(start, jnp.ones((4, 16), bool))
    assert_close(tree_attention_reference(q, k, v, start, mask.block), attend(q, k, v, mask.dense(16)), "float32")


def test_reference_padding_rows_are_zero():
    q, k, v, start, block = make_inputs(Case(7, 4, 2, 64), seed=3)
    out = tree_attention_reference(q, k, v, start, block.at[0, 3].set(False))
    assert np.all(np.asarray(out[0, 3]) == 0)


@pytest.mark.parametrize("layout", ["packed", "heads"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_gpu_kernel_matches_reference(case, layout):
    q, k, v, start, block = make_inputs(case, seed=10 + CASES.index(case))
    ref = tree_attention_reference(q, k, v, start, block)
    assert_close(tree_attention_gpu(q, k, v, start, block, layout=layout, interpret=True), ref, case.dtype)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_gpu_heads_layout_one_and_several_splits(num_splits):
    """One split writes the output in place (masked rows past T); several go through the merge."""
    case = Case(60, 12, 2, 128, cache_len=384)
    q, k, v, start, block = make_inputs(case, seed=57)
    out = tree_attention_gpu(q, k, v, start, block, layout="heads", num_splits=num_splits, block_k=32,
                             interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block), case.dtype)


@pytest.mark.parametrize("layout", ["packed", "heads"])
def test_gpu_half_width_partials(layout):
    """partial_bytes=2 stores bf16 splits normalised by their own sums and weighs them back in the merge: within bf16
    tolerance of the reference, and not bitwise the f32-partial result (so the narrow path did run); the heads layout
    uses it by default. A float32 cache keeps f32 partials."""
    case = Case(60, 12, 2, 128, "bfloat16", cache_len=384)
    q, k, v, start, block = make_inputs(case, seed=58)
    run = functools.partial(tree_attention_gpu, q, k, v, start, block, layout=layout, num_splits=4, block_k=32,
                            interpret=True)
    assert_close(run(partial_bytes=2), tree_attention_reference(q, k, v, start, block), case.dtype)
    half, full = (np.asarray(run(partial_bytes=n), np.float32) for n in (2, 4))
    assert not np.array_equal(half, full)
    # The default: 16-bit partials for the heads layout (tree verification), float32 for packed.
    np.testing.assert_array_equal(np.asarray(run(), np.float32), half if layout == "heads" else full)
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q, k, v))
    np.testing.assert_array_equal(
        tree_attention_gpu(q32, k32, v32, start, block, layout=layout, num_splits=4, block_k=32, partial_bytes=2,
                           interpret=True),
        tree_attention_gpu(q32, k32, v32, start, block, layout=layout, num_splits=4, block_k=32, interpret=True))
    with pytest.raises(ValueError, match="partial_bytes must be 2 or 4"):
        run(partial_bytes=3)


def test_split_count_choice():
    """A 60-slot tree of the 1.5B (384 packed rows in 64-row programs: 12 a split) runs in 5 splits over the bench's
    640-slot cache, not 1, and in one wave of 11 from 2K slots on; the f32 partial outputs stay within 4x the bf16
    K/V they summarise."""
    assert default_num_splits(640, 64, 384, 12, 128) == 5
    for cache in (2432, 8576, 32896):
        splits = default_num_splits(cache, 64, 384, 12, 128)
        assert splits == 11 and splits * 384 * 128 * 4 <= 4 * cache * 128 * 2 * 2
    assert default_num_splits(640, 128, 16, 2, 128) == 2  # decode: no split under 2 blocks of 128 slots


def test_layout_choice(monkeypatch):
    """Heads for tree verification (32..128 tokens), packed otherwise or when JSPEC_TREE_LAYOUT=packed; =heads
    extends it down to 16 tokens; anything else is an error."""
    assert [default_layout(t) for t in (1, 16, 31, 32, 60, 128, 600)] == ["packed"] * 3 + ["heads"] * 3 + ["packed"]
    monkeypatch.setenv("JSPEC_TREE_LAYOUT", "packed")
    assert [default_layout(t) for t in (1, 16, 60, 128, 600)] == ["packed"] * 5
    monkeypatch.setenv("JSPEC_TREE_LAYOUT", "heads")
    assert [default_layout(t) for t in (1, 16, 60, 128, 600)] == ["packed", "heads", "heads", "heads", "packed"]
    monkeypatch.setenv("JSPEC_TREE_LAYOUT", "rows")
    with pytest.raises(ValueError, match="JSPEC_TREE_LAYOUT"):
        default_layout(60)


def test_env_tuning_reaches_the_gpu_kernel(monkeypatch):
    """JSPEC_TREE_TUNING tunes tree verification only (T > 1), explicit arguments win, bad items are named; the
    tuned kernel still matches the reference."""
    from pallas_kernels.tree_attention import api, gpu

    monkeypatch.setenv("JSPEC_TREE_TUNING", "block_r=16, block_k=16,num_splits=2")
    assert gpu.env_tuning(1) == {}
    assert gpu.env_tuning(60) == {"block_r": 16, "block_k": 16, "num_splits": 2}
    seen, seen_layouts = [], []

    def spy(*args, **kwargs):
        seen.append({k: kwargs.get(k) for k in gpu.TUNING_KEYS})
        seen_layouts.append({"layout": kwargs.get("layout")})
        return gpu.tree_attention_gpu(*args, **kwargs)

    monkeypatch.setitem(api._KERNELS, "gpu", (spy, gpu.unsupported))
    case = Case(16, 8, 2, 128, cache_len=128)
    q, k, v, start, block = make_inputs(case, 3)
    out = tree_attention(q, k, v, start, block, kernel="gpu", interpret=True, num_splits=3)
    assert seen[-1] == {"block_r": 16, "block_k": 16, "num_splits": 3, "num_warps": None, "num_stages": None,
                        "partial_bytes": None}
    monkeypatch.setenv("JSPEC_TREE_LAYOUT", "heads")  # read per call too, not once per jit-cache entry
    tree_attention(q, k, v, start, block, kernel="gpu", interpret=True)
    monkeypatch.setenv("JSPEC_TREE_LAYOUT", "packed")
    tree_attention(q, k, v, start, block, kernel="gpu", interpret=True)
    assert [call["layout"] for call in seen_layouts] == ["packed", "heads", "packed"]
    np.testing.assert_allclose(out, tree_attention_reference(q, k, v, start, block), atol=TOL["float32"])
    for bad in ("block_r=0", "splits=4", "num_warps=four"):
        monkeypatch.setenv("JSPEC_TREE_TUNING", bad)
        with pytest.raises(ValueError, match=f"JSPEC_TREE_TUNING: '{bad}'"):
            tree_attention(q, k, v, start, block, kernel="gpu", interpret=True)


@pytest.mark.parametrize("layout, t", [("heads", 60), ("packed", 60), ("packed", 1)])
def test_gpu_kernel_lowers_for_h200(layout, t):
    """Qwen2.5-1.5B attention on a [28, 1, 2304, 2, 128] cache lowers to Triton IR for an abstract H200."""
    sds = jax.ShapeDtypeStruct
    args = (sds((1, t, 12, 128), jnp.bfloat16), sds((28, 1, 2304, 2, 128), jnp.bfloat16),
            sds((28, 1, 2304, 2, 128), jnp.bfloat16), sds((1,), jnp.int32), sds((1, t, t), jnp.bool_))
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=132, platform="gpu")
    for splits, partial_bytes in ((1, None), (None, None), (None, 2)):
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)):
            lowered = jax.jit(functools.partial(tree_attention_gpu, layer=5, layout=layout, num_splits=splits,
                                                partial_bytes=partial_bytes)
                              ).trace(*args).lower(lowering_platforms=("cuda",))
        assert "tree_attention_gpu" in lowered.as_text()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tpu_kernel_matches_reference(case):
    q, k, v, start, block = make_inputs(case, seed=20 + CASES.index(case))
    ref = tree_attention_reference(q, k, v, start, block)
    assert_close(tree_attention_tpu(q, k, v, start, block, interpret=True), ref, case.dtype)


@pytest.mark.parametrize("case", [CASES[2], CASES[3]], ids=str)
def test_tpu_kernel_under_tpu_simulator(case):
    """TPU interpret mode: simulated VMEM/SMEM and DMAs, NaN-filled scratch, out-of-bounds reads raise, races found."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret

    q, k, v, start, block = make_inputs(case, seed=30)
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan", num_cores_or_threads=2)
    out = tree_attention_tpu(q, k, v, start, block, block_k=128, interpret=params)
    assert not mosaic_interpret.races.races_found
    assert_close(out, tree_attention_reference(q, k, v, start, block), case.dtype)


@pytest.mark.parametrize("kernel", ["gpu", "tpu"])
def test_kernels_never_read_beyond_the_tree(kernel):
    case = Case(16, 8, 2, 128, cache_len=512)
    q, k, v, start, block = make_inputs(case, seed=40, nan_beyond_tree=True)
    clean = tuple(jnp.nan_to_num(x, nan=0.0) for x in (k, v))
    ref = tree_attention_reference(q, *clean, start, block)
    assert_close(tree_attention(q, k, v, start, block, kernel=kernel, interpret=True), ref, case.dtype)


def test_gpu_kernel_many_splits_and_small_blocks():
    """block_k 16 puts the 60-node tree over 5 masked blocks; 5 splits divide each row's blocks unevenly."""
    case = Case(60, 12, 2, 128, cache_len=384)
    q, k, v, start, block = make_inputs(case, seed=50)
    out = tree_attention_gpu(q, k, v, start, block, block_k=16, num_splits=5, interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block), case.dtype)


@pytest.mark.parametrize("kernel", ["reference", "gpu", "tpu"])
def test_layer_of_a_whole_cache(kernel):
    """`layer=`: the kernels take the [L, B, S, K, D] cache and use that layer only (the GPU kernel in place)."""
    case = Case(16, 8, 2, 128, cache_len=256)
    q, k, v, start, block = make_inputs(case, seed=55)
    others = jnp.full((3, *k.shape), jnp.nan, k.dtype)  # the other layers must never be read
    k_all, v_all = others.at[2].set(k), others.at[2].set(v)
    out = tree_attention(q, k_all, v_all, start, block, layer=2, kernel=kernel, interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block), case.dtype)


def test_padding_rows_get_zeros_from_kernels():
    q, k, v, start, block = make_inputs(Case(7, 4, 2, 64), seed=60)
    block = block.at[0, 2].set(False).at[0, :, 2].set(False)  # row 0 starts at 0: query 2 sees nothing
    for kernel in ("gpu", "tpu"):
        out = tree_attention(q, k, v, start, block, kernel=kernel, interpret=True)
        assert np.all(np.asarray(out[0, 2]) == 0), kernel


def test_dispatch(monkeypatch):
    assert choose_kernel() == ("reference" if jax.default_backend() == "cpu" else jax.default_backend())
    assert choose_kernel("gpu") == "gpu"
    monkeypatch.setenv("JSPEC_ATTENTION", "reference")
    assert choose_kernel() == "reference"
    monkeypatch.setenv("JSPEC_ATTENTION", "bogus")
    with pytest.raises(ValueError, match="unknown attention kernel"):
        choose_kernel()


def test_unsupported_shapes_fall_back_to_reference():
    case = Case(7, 4, 2, 96, cache_len=200)  # head dim not a power of two; cache length not a multiple of 128
    q, k, v, start, block = make_inputs(case, seed=70)
    ref = tree_attention_reference(q, k, v, start, block)
    for kernel in ("gpu", "tpu"):
        with pytest.warns(UserWarning, match="falls back to the reference"):
            out = tree_attention(q, k, v, start, block, kernel=kernel, interpret=True)
        assert_close(out, ref, case.dtype)


@pytest.mark.skipif(jax.default_backend() not in ("gpu", "tpu"), reason="needs a GPU or TPU")
@pytest.mark.parametrize("case", CASES, ids=str)
def test_kernel_on_device(case):
    q, k, v, start, block = make_inputs(case, seed=80 + CASES.index(case))
    ref = tree_attention_reference(q, k, v, start, block)
    assert_close(tree_attention(q, k, v, start, block, kernel=jax.default_backend()), ref, case.dtype)
    k_all, v_all = jnp.stack([v, k]), jnp.stack([k, v])  # layer 1 of a two-layer cache
    assert_close(tree_attention(q, k_all, v_all, start, block, layer=1, kernel=jax.default_backend()), ref, case.dtype)
