"""The real SmolLM2-135M-Instruct (GGUF from PyPI): greedy parity with HF transformers, cache consistency."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jspec.decode import generate
from jspec.models.cache import KVCache, causal_block_mask
from jspec.models.loading import load_model

CHATS = [
    "Write a Python function that checks whether a number is prime.",
    "What is the capital of France, and what is it famous for? Answer in two sentences.",
    "Explain what a hash map is to a beginner.",
    "Give me three tips for writing clear emails.",
]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    return load_model(str(smollm2_gguf), dtype="float32", progress=False)


@pytest.fixture(scope="module")
def chat_ids(smollm2):
    return [smollm2.tokenizer.encode_chat([{"role": "user", "content": c}]) for c in CHATS]


@pytest.mark.real_model
@pytest.mark.hf_reference
def test_greedy_tokens_equal_transformers(smollm2, smollm2_gguf, chat_ids, hf_oracle):
    [ref] = hf_oracle([{"op": "generate", "model": str(smollm2_gguf), "ids": chat_ids, "max_new_tokens": NEW_TOKENS,
                        "eos_token_id": list(smollm2.eos_token_ids)}])
    ours = generate(smollm2.graphdef, smollm2.params, chat_ids, max_new_tokens=NEW_TOKENS,
                    eos_ids=smollm2.eos_token_ids, max_cache_len=256)
    assert ours.tokens == ref["tokens"]
    assert all(len(t) > 8 for t in ours.tokens)
    assert "Paris" in smollm2.tokenizer.decode(ours.tokens[1])


@pytest.mark.real_model
def test_batched_ragged_equals_one_by_one(smollm2, chat_ids):
    kw = dict(max_new_tokens=12, eos_ids=smollm2.eos_token_ids, max_cache_len=256)
    batched = generate(smollm2.graphdef, smollm2.params, chat_ids, **kw).tokens
    single = [generate(smollm2.graphdef, smollm2.params, [ids], **kw).tokens[0] for ids in chat_ids]
    assert batched == single


@pytest.mark.real_model
def test_cached_decode_equals_full_forward(smollm2, chat_ids):
    prompt = chat_ids[0]
    new = generate(smollm2.graphdef, smollm2.params, [prompt], max_new_tokens=16, eos_ids=(),
                   max_cache_len=128).tokens[0]
    seq = jnp.array([prompt + new])
    model = nnx.merge(smollm2.graphdef, smollm2.params)
    pos = jnp.arange(seq.shape[1])[None]
    cache = KVCache.init(smollm2.cfg, 1, 128, jnp.float32)
    hidden, _, _ = model(seq, pos, cache, causal_block_mask(jnp.zeros(1, int), jnp.ones_like(pos, bool)))
    full_argmax = np.asarray(jnp.argmax(model.logits(hidden), -1))[0]
    # Position p predicts token p+1: every generated token must be the no-cache forward's argmax.
    assert full_argmax[len(prompt) - 1 : len(prompt) - 1 + len(new)].tolist() == new


@pytest.mark.real_model
def test_tokenizer_round_trip_and_chat_format(smollm2):
    tok = smollm2.tokenizer
    text = "def f(x):\n    return x ** 2  # 12 apples, café ✓"
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text
    ids = tok.encode_chat([{"role": "user", "content": "hi"}])
    rendered = tok.decode(ids, skip_special_tokens=False)
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith("<|im_start|>assistant\n")
