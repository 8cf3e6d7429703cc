"""The Mosaic GPU tree-attention kernel vs the reference.

On CPU the kernel runs in the Mosaic GPU interpreter (simulated SMEM, TMA copies, barriers and wgmma; uninitialised
SMEM reads as NaN, out-of-bounds copies raise); it also lowers for an abstract H200 without a GPU. On a GPU the
`on_device` test runs the compiled kernel. Rows start at 0, 1, 37 and S - T; the last two end in padded tree slots.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.tree_attention import choose_kernel, testing, tree_attention, tree_attention_reference
from pallas_kernels.tree_attention.gpu_mosaic import tree_attention_mosaic, unsupported
from pallas_kernels.tree_attention.testing import random_tree_masks

Case = functools.partial(testing.Case, dtype="bfloat16")  # wgmma operands: 16-bit caches only


QWEN_TREE = Case(60, 12, 2, 128)  # Qwen2.5-1.5B heads, a 60-node tree: 360 packed rows, 6 row blocks
CASES = [
    QWEN_TREE,
    Case(1, 12, 2, 128, cache_len=512),  # Qwen decode
    Case(60, 9, 3, 64, cache_len=384),  # SmolLM2 heads (block_k 128)
    Case(1, 9, 3, 64),  # SmolLM2 decode
    Case(16, 8, 2, 128, dtype="float16"),
]
TOL = 2e-2


def make_inputs(case: Case, seed: int, nan_beyond_tree: bool = False):
    rng = np.random.default_rng(seed)
    starts = np.array([0, 1, 37, case.cache_len - case.t], np.int32)
    n_valid = [case.t, case.t, max(1, case.t - 3), max(1, case.t // 2)]
    block = random_tree_masks(rng, len(starts), case.t, n_valid)
    q = rng.standard_normal((len(starts), case.t, case.heads, case.head_dim))
    k, v = rng.standard_normal((2, len(starts), case.cache_len, case.kv_heads, case.head_dim))
    if nan_beyond_tree:  # slots from start + T on must never reach the output
        beyond = np.arange(case.cache_len)[None, :] >= (starts + case.t)[:, None]
        k[beyond], v[beyond] = np.nan, np.nan
    dtype = jnp.dtype(case.dtype)
    return (jnp.asarray(q, dtype), jnp.asarray(k, dtype), jnp.asarray(v, dtype), jnp.asarray(starts),
            jnp.asarray(block))


def assert_close(out, ref):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_reference(case):
    q, k, v, start, block = make_inputs(case, seed=CASES.index(case))
    out = tree_attention_mosaic(q, k, v, start, block, interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block))


@pytest.mark.parametrize("num_splits, block_k, num_slots", [(1, 64, 2), (3, 64, 4), (5, 64, 3), (1, 128, 2)])
def test_splits_blocks_and_ring_depths(num_splits, block_k, num_slots):
    """One split writes normalised rows in place; several go through the merge (5 divide the blocks unevenly and
    leave some splits empty). Ring depths 2..4 wrap the slot index several times."""
    q, k, v, start, block = make_inputs(QWEN_TREE, seed=10 + num_splits)
    out = tree_attention_mosaic(q, k, v, start, block, num_splits=num_splits, block_k=block_k, num_slots=num_slots,
                                interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block))


def test_never_reads_beyond_the_tree():
    """NaN in K and V from start + T on (the tail of the last visited block) must not reach the output."""
    case = Case(16, 8, 2, 128)
    q, k, v, start, block = make_inputs(case, seed=20, nan_beyond_tree=True)
    ref = tree_attention_reference(q, jnp.nan_to_num(k, nan=0.0), jnp.nan_to_num(v, nan=0.0), start, block)
    assert_close(tree_attention_mosaic(q, k, v, start, block, num_splits=2, interpret=True), ref)


def test_layer_of_a_whole_cache():
    """`layer=`: the kernel takes the [L, B, S, K, D] cache and reads that layer only (NaN elsewhere)."""
    case = Case(16, 8, 2, 128)
    q, k, v, start, block = make_inputs(case, seed=30)
    others = jnp.full((3, *k.shape), jnp.nan, k.dtype)
    out = tree_attention_mosaic(q, others.at[2].set(k), others.at[2].set(v), start, block, layer=2, interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block))


def test_dispatch_by_name(monkeypatch):
    """JSPEC_ATTENTION=mosaic picks this kernel, which reads `layer` of the whole cache in place."""
    monkeypatch.setenv("JSPEC_ATTENTION", "mosaic")
    assert choose_kernel(interpret=True) == "mosaic"
    if jax.default_backend() != "gpu":
        with pytest.raises(ValueError, match="needs a gpu backend"):
            choose_kernel()
    case = Case(16, 8, 2, 128)
    q, k, v, start, block = make_inputs(case, seed=31)
    out = tree_attention(q, jnp.stack([v, k]), jnp.stack([k, v]), start, block, layer=1, interpret=True)
    assert_close(out, tree_attention_reference(q, k, v, start, block))


@pytest.mark.parametrize("num_splits", [1, 2])
def test_padding_query_gets_zeros(num_splits):
    """Row 0 starts at 0: a query whose tree row and column are all False sees nothing and must output 0."""
    q, k, v, start, block = make_inputs(Case(7, 4, 2, 64), seed=40)
    block = block.at[0, 2].set(False).at[0, :, 2].set(False)
    out = tree_attention_mosaic(q, k, v, start, block, num_splits=num_splits, interpret=True)
    assert np.all(np.asarray(out[0, 2]) == 0)
    assert_close(out, tree_attention_reference(q, k, v, start, block))


def test_under_race_detector():
    """Two programs on two simulated cores, TMA and barriers checked for races between the ring's slots."""
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as mgpu_interpret

    case = Case(16, 4, 2, 64)
    q, k, v, start, block = make_inputs(case, seed=50)
    params = plgpu.InterpretGPUParams(detect_races=True, num_cores_or_threads=2)
    out = tree_attention_mosaic(q, k, v, start, block, block_k=64, num_splits=2, num_slots=2, interpret=params)
    assert not mgpu_interpret.get_races().races_found
    assert_close(out, tree_attention_reference(q, k, v, start, block))


@pytest.mark.parametrize("q_shape, k_shape, dtype, reason", [
    ((1, 4, 12, 128), (1, 256, 5, 128), jnp.bfloat16, "not a multiple of 5 kv heads"),
    ((1, 4, 8, 96), (1, 256, 2, 96), jnp.bfloat16, "head dim 96"),
    ((1, 4, 8, 256), (1, 256, 2, 256), jnp.bfloat16, "head dim 256"),
    ((1, 4, 8, 128), (1, 256, 2, 128), jnp.float32, "cache dtype float32"),
    ((1, 4, 8, 128), (1, 200, 2, 128), jnp.bfloat16, "cache length 200"),
])
def test_unsupported_shapes(q_shape, k_shape, dtype, reason):
    q, k = jnp.zeros(q_shape, dtype), jnp.zeros(k_shape, dtype)
    assert reason in unsupported(q, k)
    with pytest.raises(ValueError, match=reason):
        tree_attention_mosaic(q, k, k, jnp.zeros((1,), jnp.int32), jnp.ones((1, 4, 4), bool), interpret=True)


def test_supported_target_shapes():
    for h, kh, d in ((12, 2, 128), (9, 3, 64)):
        assert unsupported(jnp.zeros((16, 60, h, d), jnp.bfloat16), jnp.zeros((16, 8448, kh, d), jnp.bfloat16)) is None


def test_bad_tuning_is_rejected():
    q, k, v, start, block = make_inputs(Case(4, 4, 2, 128), seed=60)
    with pytest.raises(ValueError, match="block_k 32"):
        tree_attention_mosaic(q, k, v, start, block, block_k=32, interpret=True)
    with pytest.raises(ValueError, match="exceed shared memory"):
        tree_attention_mosaic(q, k, v, start, block, block_k=128, num_slots=4, num_splits=2, interpret=True)


@pytest.mark.parametrize("b, t, heads, kv_heads, head_dim, splits", [
    (1, 60, 12, 2, 128, 1), (1, 60, 12, 2, 128, None), (1, 1, 12, 2, 128, None), (1, 60, 9, 3, 64, None),
    (4, 60, 9, 3, 64, None),  # block_k 128 with several rows: the mask copy must stay within TMA's 5 dimensions
])
def test_lowers_for_h200(b, t, heads, kv_heads, head_dim, splits):
    """Attention of layer 5 of a [28, B, 2304, K, D] cache lowers to a Mosaic GPU custom call for an abstract H200
    (the compiled path: P from registers, no interpreter), with no GPU present. PTX is only built on a GPU."""
    sds = jax.ShapeDtypeStruct
    cache = sds((28, b, 2304, kv_heads, head_dim), jnp.bfloat16)
    args = (sds((b, t, heads, head_dim), jnp.bfloat16), cache, cache, sds((b,), jnp.int32), sds((b, t, t), jnp.bool_))
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=132, platform="gpu")
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)):
        lowered = jax.jit(functools.partial(tree_attention_mosaic, layer=5, num_splits=splits)
                          ).trace(*args).lower(lowering_platforms=("cuda",))
    assert "mosaic_gpu" in lowered.as_text()


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a Hopper GPU")
@pytest.mark.parametrize("case", CASES, ids=str)
def test_on_device(case):
    q, k, v, start, block = make_inputs(case, seed=70 + CASES.index(case))
    ref = tree_attention_reference(q, k, v, start, block)
    assert_close(tree_attention_mosaic(q, k, v, start, block), ref)
    k_all, v_all = jnp.stack([v, k]), jnp.stack([k, v])  # layer 1 of a two-layer cache
    assert_close(tree_attention_mosaic(q, k_all, v_all, start, block, layer=1), ref)
