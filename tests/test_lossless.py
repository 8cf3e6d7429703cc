"""Every method's greedy float32 tokens equal vanilla decoding's, token for token, on the real SmolLM2-135M."""

import pytest

from jspec.decode import generate
from jspec.methods import available, build
from jspec.models.loading import load_model
from jspec.spec_decode import speculative_generate

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "List the planets of the solar system in order from the sun.",
    "Repeat this sentence twice: the quick brown fox jumps over the lazy dog.",
    "Explain what a hash map is to a beginner.",
    "Write a haiku about the sea.",
]
NEW_TOKENS = 64
# The EAGLE-3 methods run with the drafter shipped for SmolLM2 (jspec/weights/). The block drafters have no
# shipped SmolLM2 checkpoint: tests/test_dflash.py and tests/test_graft_tail.py check them with random drafters.
BLOCK_METHODS = {"dflash", "domino", "graft_tail"}
SPEC_METHODS = sorted(set(available()) - BLOCK_METHODS)
RAGGED_METHODS = sorted(set(SPEC_METHODS) - {"eagle3", "eagle3_pruned"})  # graft covers their tree code in batch
# Trees of 20 slots, not the default 60: the same code paths at a third of the CPU cost of each verification (the
# 60-slot trees decode in the CLI, bench and notebook tests).
OPTIONS = {"draft_model": {"drafter": "truncate:12"},  # SmolLM2 has no smaller sibling: a layer-truncated copy
           "token_recycling": {"budget": 20},
           **{m: {"drafter": "smollm2-135m-eagle3", "budget": 20, "top_k": 4}
              for m in ("eagle3", "eagle3_pruned", "graft")}}


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    return load_model(str(smollm2_gguf), dtype="float32", progress=False)


@pytest.fixture(scope="module")
def prompt_ids(smollm2):
    return [smollm2.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]


@pytest.fixture(scope="module")
def vanilla_tokens(smollm2, prompt_ids):
    return generate(smollm2.graphdef, smollm2.params, prompt_ids, max_new_tokens=NEW_TOKENS,
                    eos_ids=smollm2.eos_token_ids, max_cache_len=512).tokens


@pytest.mark.real_model
@pytest.mark.parametrize("name", SPEC_METHODS)
def test_greedy_equals_vanilla_batch1(smollm2, prompt_ids, vanilla_tokens, name):
    method, params = build(name, smollm2, **OPTIONS.get(name, {}))
    state = None
    for ids, expected in zip(prompt_ids[:3], vanilla_tokens):  # the third repeats itself: retrieval's case
        res = speculative_generate(smollm2.graphdef, smollm2.params, [ids], method=method, method_params=params,
                                   max_new_tokens=NEW_TOKENS, eos_ids=smollm2.eos_token_ids, max_cache_len=512,
                                   method_state=state)
        state = res.method_state  # hot start across prompts, as in serving
        assert res.tokens[0] == expected
        assert sum(res.accepted[0]) == len(expected) and all(a >= 1 for a in res.accepted[0])


@pytest.mark.real_model
@pytest.mark.parametrize("name", RAGGED_METHODS)
def test_greedy_equals_vanilla_ragged_batch3(smollm2, prompt_ids, vanilla_tokens, name):
    rows = [0, 2, 4]  # different prompt lengths, different acceptance per step
    method, params = build(name, smollm2, **OPTIONS.get(name, {}))
    res = speculative_generate(smollm2.graphdef, smollm2.params, [prompt_ids[i] for i in rows],
                               method=method, method_params=params, max_new_tokens=NEW_TOKENS,
                               eos_ids=smollm2.eos_token_ids, max_cache_len=512)
    assert res.tokens == [vanilla_tokens[i] for i in rows]
