"""The eagle3 method in the speculative loop (random drafter): lossless, and the drafter's cache after decoding
holds exactly the pairs (target feature g_p, token p + 1) of the committed sequence."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jspec.decode import generate
from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter
from jspec.methods import eagle3_method
from jspec.models.cache import KVCache, causal_block_mask
from jspec.models.loading import load_model
from jspec.spec_decode import speculative_generate

PROMPTS = ["Write a Python function that checks whether a number is prime.", "Write a haiku about the sea.",
           "List the planets of the solar system in order from the sun."]
OPTIONS = dict(top_k=4, depth=4, budget=16)


@pytest.fixture(scope="module")
def setup(smollm2_gguf):
    m = load_model(str(smollm2_gguf), dtype="float32", progress=False)
    cfg = Eagle3Config.for_target(m.cfg, draft_vocab_size=m.cfg.vocab_size)
    graphdef, params = nnx.split(Eagle3Drafter(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    method, method_params = eagle3_method(m, graphdef, params, **OPTIONS)
    ids = [m.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    return m, method, method_params, ids


@pytest.mark.real_model
def test_eagle3_greedy_equals_vanilla(setup):
    m, method, method_params, ids = setup
    kw = dict(max_new_tokens=32, eos_ids=m.eos_token_ids, max_cache_len=256)
    vanilla = generate(m.graphdef, m.params, ids, **kw).tokens
    batched = speculative_generate(m.graphdef, m.params, ids, method=method, method_params=method_params, **kw)
    assert batched.tokens == vanilla
    single = speculative_generate(m.graphdef, m.params, [ids[1]], method=method, method_params=method_params, **kw)
    assert single.tokens[0] == vanilla[1]


@pytest.mark.real_model
def test_drafter_cache_holds_the_committed_pairs(setup):
    m, method, method_params, ids = setup
    prompt = ids[0]
    res = speculative_generate(m.graphdef, m.params, [prompt], method=method, method_params=method_params,
                               max_new_tokens=12, eos_ids=(), max_cache_len=128)
    state = res.method_state
    fed = int(state.fed[0])
    seq = prompt + res.tokens[0]
    assert fed >= len(prompt) + 4  # decoding advanced the drafter past the prompt

    # Independent computation: target taps over the whole sequence, then the drafter over pairs (g_p, x_{p+1}).
    target = nnx.merge(m.graphdef, m.params)
    tokens = jnp.asarray([seq])
    pos = jnp.arange(len(seq))[None]
    full = causal_block_mask(jnp.zeros(1, jnp.int32), jnp.ones_like(pos, bool))
    _, _, taps = target(tokens, pos, KVCache.init(m.cfg, 1, len(seq), jnp.float32), full, method.taps)
    features = jnp.concatenate(taps, axis=-1)[:, :fed]
    drafter = nnx.merge(method.drafter, method_params["drafter"])
    pairs_tok = tokens[:, 1 : fed + 1]
    _, _, cache = drafter(method_params["embed"], pairs_tok, features, pos[:, :fed], drafter.init_cache(1, fed,
                          jnp.float32), causal_block_mask(jnp.zeros(1, jnp.int32), jnp.ones((1, fed), bool)))
    np.testing.assert_allclose(np.asarray(state.cache.k[0, 0, :fed]), np.asarray(cache.k[0, 0, :fed]), atol=2e-4)
    np.testing.assert_allclose(np.asarray(state.cache.v[0, 0, :fed]), np.asarray(cache.v[0, 0, :fed]), atol=2e-4)
