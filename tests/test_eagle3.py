"""EAGLE-3 draft head: forward vs an independent NumPy reference, tree drafting vs paths, checkpoints, draft vocab."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

from jspec.config import ModelConfig, RopeConfig
from jspec.drafters.draft_vocab import build_draft_vocab, select_draft_vocab, token_counts
from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter
from jspec.errors import UserError
from jspec.io.eagle3_checkpoint import build_drafter, load_eagle3_checkpoint, save_eagle3_checkpoint
from jspec.models.cache import BlockMask, causal_block_mask

TARGET = ModelConfig(family="llama", vocab_size=80, hidden_size=32, intermediate_size=64, num_layers=8, num_heads=4,
                     num_kv_heads=2, head_dim=8, rms_norm_eps=1e-5, rope=RopeConfig(theta=10000.0))
CFG = Eagle3Config.for_target(TARGET, draft_vocab_size=50)
H, V, VD = 32, 80, 50


def official_tensors(seed: int, cfg: Eagle3Config = CFG) -> dict[str, np.ndarray]:
    """Random weights under SafeAILab/EAGLE's state-dict names (float64; O(1) activations)."""
    rng = np.random.default_rng(seed)
    h, f, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size

    def mat(out, inp):
        return rng.normal(size=(out, inp)) / np.sqrt(inp)

    def norm():
        return 1 + 0.2 * rng.normal(size=h)

    d2t, t2d = select_draft_vocab(rng.integers(0, 100, cfg.vocab_size), cfg.draft_vocab_size)
    return {
        "fc.weight": mat(h, 3 * cfg.target_hidden_size),
        "midlayer.input_layernorm.weight": norm(),
        "midlayer.hidden_norm.weight": norm(),
        "midlayer.self_attn.q_proj.weight": mat(q, 2 * h),
        "midlayer.self_attn.k_proj.weight": mat(kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": mat(kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": mat(h, q),
        "midlayer.post_attention_layernorm.weight": norm(),
        "midlayer.mlp.gate_proj.weight": mat(f, h),
        "midlayer.mlp.up_proj.weight": mat(f, h),
        "midlayer.mlp.down_proj.weight": mat(h, f),
        "norm.weight": norm(),
        "lm_head.weight": mat(cfg.draft_vocab_size, h),
        "d2t": d2t,
        "t2d": t2d,
    }


# ---- NumPy reference of EAGLE's cnets.Model forward (float64, one row) -------------------------------------------

def _rms(x, g, eps=CFG.rms_norm_eps):
    return g * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def _rope(x, positions):  # x [T, heads, D], half-split layout
    d = x.shape[-1]
    angles = positions[:, None] * (CFG.rope.theta ** (-np.arange(0, d, 2) / d))
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def reference_step(w, embed, tokens, features, positions, past_k, past_v):
    """New tokens attend causally to each other and to all of `past_k/v` [P, kv_heads, D]."""
    hd, nh, nkv = CFG.head_dim, CFG.num_heads, CFG.num_kv_heads
    g = features @ w["fc.weight"].T if features.shape[-1] == 3 * H else features
    a = np.concatenate([_rms(embed[tokens], w["midlayer.input_layernorm.weight"]),
                        _rms(g, w["midlayer.hidden_norm.weight"])], -1)
    t = len(tokens)
    q = _rope((a @ w["midlayer.self_attn.q_proj.weight"].T).reshape(t, nh, hd), positions)
    k = _rope((a @ w["midlayer.self_attn.k_proj.weight"].T).reshape(t, nkv, hd), positions)
    v = (a @ w["midlayer.self_attn.v_proj.weight"].T).reshape(t, nkv, hd)
    keys, values = np.concatenate([past_k, k]), np.concatenate([past_v, v])
    p = len(past_k)
    out = np.zeros((t, nh, hd))
    for i in range(t):
        for head in range(nh):
            kv_head = head // (nh // nkv)
            scores = keys[: p + i + 1, kv_head] @ q[i, head] / np.sqrt(hd)
            probs = np.exp(scores - scores.max())
            out[i, head] = (probs / probs.sum()) @ values[: p + i + 1, kv_head]
    x = g + out.reshape(t, nh * hd) @ w["midlayer.self_attn.o_proj.weight"].T
    y = _rms(x, w["midlayer.post_attention_layernorm.weight"])
    gate, up = y @ w["midlayer.mlp.gate_proj.weight"].T, y @ w["midlayer.mlp.up_proj.weight"].T
    x = x + (gate / (1 + np.exp(-gate)) * up) @ w["midlayer.mlp.down_proj.weight"].T
    logits = _rms(x, w["norm.weight"]) @ w["lm_head.weight"].T
    return x, logits, keys, values


@nnx.jit  # one compilation per shape: op-by-op dispatch is slow on CPU
def forward(drafter: Eagle3Drafter, *args):
    return drafter(*args)


# ---- fixtures ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def weights():
    return official_tensors(0)


@pytest.fixture(scope="module")
def drafter(weights):
    return build_drafter(CFG, weights, "float32", "test")


@pytest.fixture(scope="module")
def embed():
    return np.random.default_rng(1).normal(size=(V, H))


def _prefill(drafter, embed, tokens, features, valid, max_len=16):
    b, t = tokens.shape
    cache = drafter.init_cache(b, max_len, jnp.float32)
    mask = causal_block_mask(jnp.zeros(b, jnp.int32), jnp.asarray(valid))
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    return forward(drafter, jnp.asarray(embed, jnp.float32), jnp.asarray(tokens), jnp.asarray(features, jnp.float32),
                   positions, cache, mask)


# ---- (a) forward vs reference --------------------------------------------------------------------------------------

def test_prefill_then_step_matches_numpy_reference(drafter, weights, embed):
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, V, (2, 5))
    features = rng.normal(size=(2, 5, 3 * H))
    valid = np.array([[True] * 5, [True] * 4 + [False]])  # row 1 is padded
    lengths = valid.sum(1)
    hidden, logits, cache = _prefill(drafter, embed, tokens, features, valid)

    step_tokens = rng.integers(0, V, (2, 1))
    step_features = np.asarray(hidden)[np.arange(2), lengths - 1][:, None]  # the head feeds its own output back
    step_mask = causal_block_mask(jnp.asarray(lengths, jnp.int32), jnp.ones((2, 1), bool))
    step_hidden, step_logits, _ = forward(drafter, jnp.asarray(embed, jnp.float32), jnp.asarray(step_tokens),
                                         jnp.asarray(step_features), jnp.asarray(lengths)[:, None], cache, step_mask)

    empty = np.zeros((0, CFG.num_kv_heads, CFG.head_dim))
    for r, n in enumerate(lengths):
        ref_h, ref_l, k, v = reference_step(weights, embed, tokens[r, :n], features[r, :n], np.arange(n), empty, empty)
        np.testing.assert_allclose(np.asarray(hidden)[r, :n], ref_h, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.asarray(logits)[r, :n], ref_l, atol=1e-5, rtol=0)
        ref_h, ref_l, _, _ = reference_step(weights, embed, step_tokens[r], step_features[r], np.array([n]), k, v)
        np.testing.assert_allclose(np.asarray(step_hidden)[r], ref_h, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.asarray(step_logits)[r], ref_l, atol=1e-5, rtol=0)


# ---- (b) tree drafting -----------------------------------------------------------------------------------------------

def test_tree_level_with_earlier_level_in_window_equals_paths(drafter, embed):
    rng = np.random.default_rng(3)
    emb = jnp.asarray(embed, jnp.float32)
    p = 5
    hidden, _, cache = _prefill(drafter, embed, rng.integers(0, V, (1, p)), rng.normal(size=(1, p, 3 * H)),
                                np.ones((1, p), bool))
    root = hidden[:, -1:]
    start = jnp.array([p], jnp.int32)

    # Level 1: two siblings (slots p, p+1). Level 2: three children (parents 0, 0, 1) written after them.
    level1 = rng.integers(0, V, (1, 2))
    h1, l1, tree_cache = forward(drafter, emb, jnp.asarray(level1), jnp.repeat(root, 2, 1), jnp.full((1, 2), p), cache,
                                 BlockMask(start=start, block=jnp.eye(2, dtype=bool)[None]))
    parents = np.array([0, 0, 1])
    level2 = rng.integers(0, V, (1, 3))
    block = np.concatenate([np.eye(2, dtype=bool)[parents], np.eye(3, dtype=bool)], 1)[None]  # [1, 3, 5]
    h2, l2, _ = forward(drafter, emb, jnp.asarray(level2), h1[:, parents], jnp.full((1, 3), p + 1), tree_cache,
                        BlockMask(start=start, block=jnp.asarray(block), offset=2))

    for i, parent in enumerate(parents):  # chain decoding along root -> parent -> child
        one = jnp.ones((1, 1), bool)
        ph, pl, path_cache = forward(drafter, emb, jnp.asarray(level1[:, parent : parent + 1]), root,
                                     jnp.full((1, 1), p), cache, causal_block_mask(start, one))
        ch, cl, _ = forward(drafter, emb, jnp.asarray(level2[:, i : i + 1]), ph, jnp.full((1, 1), p + 1), path_cache,
                            causal_block_mask(start + 1, one))
        np.testing.assert_allclose(h1[:, parent], ph[:, 0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(l1[:, parent], pl[:, 0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(h2[:, i], ch[:, 0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(l2[:, i], cl[:, 0], atol=1e-5, rtol=0)


# ---- (c) checkpoints -----------------------------------------------------------------------------------------------

def _official_config(cfg: Eagle3Config = CFG) -> dict:
    # Shaped like EAGLE's traineagle3/config.json (no head_dim / target_hidden_size: both default from hidden_size).
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "num_hidden_layers": 1,
            "max_position_embeddings": 2048, "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope.theta,
            "pad_token_id": 0, "tie_word_embeddings": False, "torch_dtype": "float16",
            "vocab_size": cfg.vocab_size, "draft_vocab_size": cfg.draft_vocab_size}


def _write_checkpoint(path, tensors, config=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config or _official_config()))
    safetensors.numpy.save_file({k: np.ascontiguousarray(v.astype(np.float32) if v.dtype == np.float64 else v)
                                 for k, v in tensors.items()}, str(path / "model.safetensors"))


def _outputs(drafter, embed, seed=4):
    rng = np.random.default_rng(seed)
    hidden, logits, _ = _prefill(drafter, embed, rng.integers(0, V, (1, 6)), rng.normal(size=(1, 6, 3 * H)),
                                 np.ones((1, 6), bool))
    return np.asarray(hidden), np.asarray(logits)


def test_official_checkpoint_loads_to_the_same_outputs(drafter, weights, embed, tmp_path):
    # Released heads may carry the frozen embedding copy; it is ignored (the target's own is passed in).
    _write_checkpoint(tmp_path / "ckpt", weights | {"embed_tokens.weight": embed})
    loaded = load_eagle3_checkpoint(tmp_path / "ckpt", TARGET)
    assert loaded.cfg == CFG
    for got, want in zip(_outputs(loaded, embed), _outputs(drafter, embed)):
        np.testing.assert_array_equal(got, want)
    ids = jnp.arange(VD)
    np.testing.assert_array_equal(loaded.draft_to_target(ids), np.flatnonzero(weights["t2d"]))


def test_full_vocab_checkpoint_without_maps_is_identity(weights, tmp_path):
    cfg = dataclasses.replace(CFG, draft_vocab_size=V)
    tensors = {k: v for k, v in official_tensors(5, cfg).items() if k not in ("d2t", "t2d")}
    _write_checkpoint(tmp_path / "full", tensors, _official_config(cfg))
    loaded = load_eagle3_checkpoint(tmp_path / "full", TARGET)
    np.testing.assert_array_equal(loaded.draft_to_target(jnp.arange(V)), np.arange(V))


@pytest.mark.parametrize("damage, target, message", [
    (lambda w: {k: v for k, v in w.items() if k != "midlayer.hidden_norm.weight"}, TARGET,
     r"missing 1 EAGLE-3 tensors.*midlayer\.hidden_norm\.weight"),
    (lambda w: w | {"fc.weight": w["fc.weight"].T}, TARGET, r"fc\.weight has shape \(96, 32\), expected \(32, 96\)"),
    (lambda w: w | {"midlayer.layers.1.mlp.up_proj.weight": w["midlayer.mlp.up_proj.weight"]}, TARGET,
     "not part of an EAGLE-3 head"),
    (lambda w: w | {"d2t": w["d2t"] + 1}, TARGET, "d2t / t2d do not describe the same draft vocabulary"),
    (lambda w: w, dataclasses.replace(TARGET, vocab_size=81), "vocab mismatch.*80 tokens.*81"),
    (lambda w: w, dataclasses.replace(TARGET, hidden_size=64, num_heads=8), "width 32.*64"),
])
def test_checkpoint_errors(weights, tmp_path, damage, target, message):
    _write_checkpoint(tmp_path / "bad", damage(weights))
    with pytest.raises(UserError, match=message):
        load_eagle3_checkpoint(tmp_path / "bad", target)


def test_corrupt_or_missing_files(weights, tmp_path):
    with pytest.raises(UserError, match="no config.json"):
        load_eagle3_checkpoint(tmp_path, TARGET)
    _write_checkpoint(tmp_path / "c", weights)
    (tmp_path / "c" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UserError, match="corrupt safetensors"):
        load_eagle3_checkpoint(tmp_path / "c", TARGET)
    (tmp_path / "c" / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no model.safetensors"):
        load_eagle3_checkpoint(tmp_path / "c", TARGET)
    (tmp_path / "c" / "config.json").write_text("{")
    with pytest.raises(UserError, match="invalid JSON"):
        load_eagle3_checkpoint(tmp_path / "c", TARGET)


def test_save_load_round_trip(embed, tmp_path):
    rope = RopeConfig(theta=500000.0, scaling="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position=8192, freq_factors=tuple(1.0 + 0.5 * i for i in range(CFG.head_dim // 2)))
    cfg = dataclasses.replace(CFG, rope=rope)
    drafter = build_drafter(cfg, official_tensors(6, cfg), "float32", "test")
    save_eagle3_checkpoint(drafter, tmp_path / "ours")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_eagle3_checkpoint(tmp_path / "ours", TARGET)
    assert loaded.cfg == cfg
    for got, want in zip(_outputs(loaded, embed), _outputs(drafter, embed)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(loaded.t2d[...], drafter.t2d[...])


# ---- (d) draft vocabulary ------------------------------------------------------------------------------------------

def test_draft_vocab_from_counts_and_records():
    counts = np.array([0, 5, 3, 5, 0, 1, 7, 0, 1, 0])
    # Top 5: 6 (7), 1 and 3 (5), 2 (3), then 5 over 8 (tied at 1: lower id first) -> used = [1, 2, 3, 5, 6].
    d2t, t2d = select_draft_vocab(counts, 5)
    np.testing.assert_array_equal(d2t, [1, 1, 1, 2, 2])
    np.testing.assert_array_equal(np.flatnonzero(t2d), [1, 2, 3, 5, 6])
    assert d2t.dtype == np.int64 and t2d.dtype == bool

    # Only loss-masked positions count: the prompt's 9s are ignored.
    records = [(np.array([9, 9, 4, 4, 2]), np.array([0, 0, 1, 1, 1], bool)), (np.array([9, 2, 4]), np.ones(3, bool))]
    np.testing.assert_array_equal(token_counts(records, 10), [0, 0, 2, 0, 3, 0, 0, 0, 0, 1])
    d2t, t2d = build_draft_vocab(records, 10, 4)  # 4, 2, 9, then the unseen 0 fills the tail
    np.testing.assert_array_equal(np.flatnonzero(t2d), [0, 2, 4, 9])

    small = dataclasses.replace(CFG, vocab_size=10, draft_vocab_size=4)
    drafter = build_drafter(small, official_tensors(7, small), "float32", "test")
    drafter.set_vocab_maps(jnp.asarray(d2t), jnp.asarray(t2d))
    np.testing.assert_array_equal(drafter.draft_to_target(jnp.array([[3, 0], [1, 2]])), [[9, 0], [2, 4]])
    with pytest.raises(UserError, match="outside a vocabulary of 10"):
        token_counts([(np.array([10]), np.ones(1, bool))], 10)


# ---- (e) taps --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_layers, taps", [(28, (1, 13, 24)), (30, (1, 14, 26))])
def test_taps_are_outputs_of_layers_before_eagle_hf_indices(num_layers, taps):
    # EAGLE taps the states entering HF layers {2, L//2, L-3}: outputs of the layers just before.
    cfg = Eagle3Config.for_target(dataclasses.replace(TARGET, num_layers=num_layers), 32)
    assert cfg.tap_layers == taps == tuple(i - 1 for i in (2, num_layers // 2, num_layers - 3))
    with pytest.raises(UserError, match="at least 7 layers"):
        Eagle3Config.for_target(dataclasses.replace(TARGET, num_layers=6), 32)
