"""Real Qwen2.5-Coder-0.5B-Instruct GGUF (Q5_0, Q8_0, Q4_K, Q6_K tensors, qwen2 arch with q/k/v biases): greedy
parity with HF transformers and Qwen's chat template."""

import pytest

from jspec.decode import generate
from jspec.models.loading import load_model

PROMPTS = ["Write a Python function that returns the n-th Fibonacci number.",
           "What is the capital of France? Answer in one sentence."]


@pytest.mark.real_model
@pytest.mark.hf_reference
def test_qwen_greedy_equals_transformers(qwen05_gguf, hf_oracle):
    model = load_model(str(qwen05_gguf), dtype="float32", progress=False)
    assert model.cfg.family == "qwen2" and model.cfg.attention_bias and not model.cfg.tie_embeddings
    assert 151645 in model.eos_token_ids  # <|im_end|>
    ids = [model.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    assert model.tokenizer.decode(ids[0], skip_special_tokens=False).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>")
    ours = generate(model.graphdef, model.params, ids, max_new_tokens=16, eos_ids=model.eos_token_ids,
                    max_cache_len=128).tokens
    [ref] = hf_oracle([{"op": "generate", "model": str(qwen05_gguf), "ids": ids, "max_new_tokens": 16,
                        "eos_token_id": list(model.eos_token_ids)}])
    assert ours == ref["tokens"]
    assert "Paris" in model.tokenizer.decode(ours[1])
