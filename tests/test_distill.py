"""Self-distillation data on the real SmolLM2: content, loss masks, resumption, settings guard."""

import json

import numpy as np
import pytest

from jspec.errors import UserError
from jspec.models.loading import load_model
from jspec.train.distill import DistillConfig, distill, read_dataset

CFG = DistillConfig(num_prompts=4, max_prompt_tokens=128, max_new_tokens=6, batch_size=2, shard_size=2)


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    return load_model(str(smollm2_gguf), dtype="float32", progress=False)


@pytest.mark.real_model
def test_distill_records_resume_and_guard(smollm2, tmp_path):
    out = tmp_path / "d"
    assert distill(smollm2, out, CFG, progress=False) == 4
    records = list(read_dataset(out))
    assert len(records) == 4 and len({r[0] for r in records}) == 4
    for _, tokens, mask in records:
        prompt_len = int(np.argmax(mask))
        assert 0 < prompt_len < len(tokens) <= prompt_len + CFG.max_new_tokens and mask[prompt_len:].all()
        text = smollm2.tokenizer.decode(tokens[:prompt_len].tolist(), skip_special_tokens=False)
        assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    first = (out / "shard-00000.npz").read_bytes()
    second = (out / "shard-00001.npz").read_bytes()

    # Interrupted after the first shard: resuming regenerates exactly the missing one and leaves the other alone.
    (out / "shard-00001.npz").unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "shards": 1}))
    assert distill(smollm2, out, CFG, progress=False) == 4
    assert (out / "shard-00000.npz").read_bytes() == first
    assert (out / "shard-00001.npz").read_bytes() == second
    assert [r[0] for r in read_dataset(out)] == [r[0] for r in records]

    with pytest.raises(UserError, match="other settings"):
        distill(smollm2, out, DistillConfig(num_prompts=4, max_prompt_tokens=128, max_new_tokens=7, batch_size=2,
                                            shard_size=2), progress=False)
    (out / "shard-00000.npz").write_bytes(b"junk")
    with pytest.raises(UserError, match="corrupt"):
        list(read_dataset(out))


def test_shard_size_must_be_a_multiple_of_the_batch():
    with pytest.raises(UserError, match="multiple"):
        DistillConfig(num_prompts=4, batch_size=3, shard_size=4)
