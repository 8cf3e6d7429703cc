"""Logit parity with HF transformers on tiny random llama / qwen2 / qwen3 checkpoints saved as HF directories, and
ModelConfig.num_params against the parameters a Decoder actually holds."""

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jspec.config import ModelConfig
from jspec.io import hf_loader, weights
from jspec.models.decoder import Decoder
from jspec.models.cache import KVCache, causal_block_mask

CASES = {
    "llama": ("llama", {}),
    "llama-tied-rope3": ("llama", {"tie_word_embeddings": True,
                                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    "qwen2": ("qwen2", {}),
    "qwen2-yarn": ("qwen2", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 64}}),
    "qwen3": ("qwen3", {"num_key_value_heads": 1}),
}
RNG = np.random.default_rng(0)
SEQS = [RNG.integers(0, 211, size=n).tolist() for n in (37, 5, 120)]


@pytest.fixture(scope="module")
def tiny_models(hf_oracle, tmp_path_factory):
    """name -> (dir, {seq index: HF logits}) for every case, made in one oracle call."""
    root = tmp_path_factory.mktemp("tiny")
    requests = []
    for i, (name, (family, overrides)) in enumerate(CASES.items()):
        d = root / name
        requests.append({"op": "make_tiny", "family": family, "dir": str(d), "seed": i, "overrides": overrides})
        requests.append({"op": "logits", "model": str(d), "ids": SEQS, "out": str(root / f"{name}.npz")})
    hf_oracle(requests)
    out = {}
    for name in CASES:
        ref = np.load(root / f"{name}.npz")
        out[name] = (root / name, [ref[f"arr_{i}"] for i in range(len(SEQS))])
    return out


def _load(path):
    cfg, tensors = hf_loader.load_hf_dir(path)
    graphdef, params = weights.build_params(cfg, tensors, "float32", str(path))
    return cfg, nnx.merge(graphdef, params)


def _prefill_logits(model, cfg, ids_batch, max_len=256):
    """Logits for every position of ragged prompts in one right-padded batch."""
    width = max(map(len, ids_batch))
    tokens = np.zeros((len(ids_batch), width), np.int32)
    for i, ids in enumerate(ids_batch):
        tokens[i, : len(ids)] = ids
    lens = jnp.array([len(x) for x in ids_batch])
    pos = jnp.broadcast_to(jnp.arange(width), tokens.shape)
    valid = pos < lens[:, None]
    cache = KVCache.init(cfg, len(ids_batch), max_len, jnp.float32)
    hidden, cache, _ = model(jnp.asarray(tokens), pos, cache, causal_block_mask(jnp.zeros(len(ids_batch), int), valid))
    return np.asarray(model.logits(hidden)), cache


@pytest.mark.hf_reference
@pytest.mark.parametrize("name", list(CASES))
def test_prefill_logits_match_hf(tiny_models, name):
    path, refs = tiny_models[name]
    cfg, model = _load(path)
    logits, _ = _prefill_logits(model, cfg, SEQS)  # ragged batch: padding must not leak into real rows
    for i, ref in enumerate(refs):
        np.testing.assert_allclose(logits[i, : len(SEQS[i])], ref, atol=1e-4, rtol=0)


@pytest.mark.hf_reference
@pytest.mark.parametrize("name", ["llama", "qwen2-yarn", "qwen3"])
def test_cached_step_by_step_logits_match_hf(tiny_models, name):
    path, refs = tiny_models[name]
    cfg, model = _load(path)
    seq, ref = SEQS[0], refs[0]
    split, max_len = 10, 64
    _, cache = _prefill_logits(model, cfg, [seq[:split]], max_len)
    cache = KVCache(cache.k, cache.v, jnp.array([split]))
    step = jax.jit(lambda c, tok, p: model(tok, p, c, causal_block_mask(p[:, 0], jnp.ones_like(p, bool))))
    for t in range(split, len(seq)):
        pos = jnp.array([[t]])
        hidden, cache, _ = step(cache, jnp.array([[seq[t]]]), pos)
        np.testing.assert_allclose(np.asarray(model.logits(hidden))[0, 0], ref[t], atol=1e-4, rtol=0)


@pytest.mark.hf_reference
def test_hidden_state_taps_are_layer_outputs(tiny_models):
    path, _ = tiny_models["qwen2"]
    cfg, model = _load(path)
    tokens = jnp.array([SEQS[1]])
    pos = jnp.arange(tokens.shape[1])[None]
    cache = KVCache.init(cfg, 1, 16, jnp.float32)
    mask = causal_block_mask(jnp.zeros(1, int), jnp.ones_like(pos, bool))
    _, _, taps = model(tokens, pos, cache, mask, taps=(0, 2))
    # Re-run with the last layer dropped: the output of layer 2 (the last) must equal the pre-norm final state.
    x = jnp.take(model.embed[...], tokens, axis=0)
    assert len(taps) == 2 and taps[0].shape == (1, tokens.shape[1], cfg.hidden_size)
    normed_last = model.norm(taps[1])
    hidden, _, _ = model(tokens, pos, cache, mask)
    np.testing.assert_allclose(np.asarray(normed_last), np.asarray(hidden), atol=1e-6)
    assert not np.allclose(np.asarray(taps[0]), np.asarray(x))



@pytest.mark.parametrize("family,extra", [("llama", {}), ("llama", {"tie_embeddings": True}),
                                          ("qwen2", {"attention_bias": True}), ("qwen3", {"qk_norm": True})])
def test_num_params_counts_the_decoder_parameters(family, extra):
    cfg = ModelConfig(family=family, vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=3, num_heads=4,
                      num_kv_heads=2, head_dim=8, **extra)
    decoder = nnx.eval_shape(lambda: Decoder(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    assert cfg.num_params() == sum(x.size for x in jax.tree.leaves(nnx.state(decoder, nnx.Param)))
