"""Self-distillation data on SmolLM2's first 4 layers (its tokenizer and chat template; the checks do not depend on
the answers' quality): content, loss masks, resumption, settings guard, benchmark prompts."""

import dataclasses
import json

import numpy as np
import pytest

from jspec.bench.datasets import load_prompts
from jspec.errors import UserError
from jspec.models.loading import load_model
from jspec.train.distill import DistillConfig, distill, read_dataset

CFG = DistillConfig(num_prompts=4, max_prompt_tokens=128, max_new_tokens=6, batch_size=2, shard_size=2)


@pytest.fixture(scope="module")
def smollm2(smollm2_4_layers):
    return load_model(str(smollm2_4_layers), dtype="float32", progress=False)


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


@pytest.mark.real_model
def test_every_batch_has_one_size(smollm2, tmp_path, monkeypatch):
    """A short last batch is padded to the batch size, or to the prompt count when that is smaller (one decode-loop
    compilation per run); the padding rows are not recorded."""
    import jspec.train.distill as distill_module

    batch_rows = []

    def counting_generate(graphdef, params, prompts, **kwargs):
        batch_rows.append(len(prompts))
        return generate(graphdef, params, prompts, **kwargs)

    generate = distill_module.generate
    monkeypatch.setattr(distill_module, "generate", counting_generate)
    cfg = DistillConfig(num_prompts=3, max_prompt_tokens=128, max_new_tokens=4, batch_size=2, shard_size=2)
    assert distill(smollm2, tmp_path / "d", cfg, progress=False) == 3
    assert batch_rows == [2, 2]
    records = list(read_dataset(tmp_path / "d"))
    assert len(records) == 3 and len({r[0] for r in records}) == 3
    # The padded batch's real row is the answer its prompt gets beside another prompt.
    distill(smollm2, tmp_path / "ref", dataclasses.replace(cfg, num_prompts=4), progress=False)
    full = list(read_dataset(tmp_path / "ref"))
    assert [r[1].tolist() for r in records] == [r[1].tolist() for r in full[:3]]
    # Fewer prompts than a batch: the batch shrinks to them instead of computing padding rows.
    batch_rows.clear()
    small = dataclasses.replace(cfg, num_prompts=3, batch_size=4, shard_size=4)
    assert distill(smollm2, tmp_path / "small", small, progress=False) == 3
    assert batch_rows == [3]


def test_shard_size_must_be_a_multiple_of_the_batch():
    with pytest.raises(UserError, match="multiple"):
        DistillConfig(num_prompts=4, batch_size=3, shard_size=4)


@pytest.mark.real_model
def test_distill_from_a_benchmark_past_its_first_records(smollm2, tmp_path):
    """Prompts of a bench task after the `skip` the bench reads, with the bench's instruction for it."""
    cfg = DistillConfig(num_prompts=2, max_prompt_tokens=256, max_new_tokens=4, batch_size=2, shard_size=2,
                        dataset="gsm8k", skip=3)
    out = tmp_path / "gsm8k"
    assert distill(smollm2, out, cfg, progress=False) == 2
    records = list(read_dataset(out))
    assert [r[0] for r in records] == [p["id"] for p in load_prompts("gsm8k", 5)[3:]]
    for _, tokens, mask in records:
        text = smollm2.tokenizer.decode(tokens[: int(np.argmax(mask))].tolist())
        assert "Solve the problem step by step" in text
    assert json.loads((out / "manifest.json").read_text())["config"]["dataset"] == "gsm8k"
    with pytest.raises(UserError, match="only 4 humaneval prompts after the first 160 records fit 256 tokens; "
                                        "asked for 5"):
        distill(smollm2, tmp_path / "he", DistillConfig(num_prompts=5, max_prompt_tokens=256, dataset="humaneval",
                                                        skip=160, batch_size=1, shard_size=1), progress=False)
    every = DistillConfig(num_prompts=None, max_prompt_tokens=256, max_new_tokens=2, dataset="humaneval", skip=160,
                          batch_size=2, shard_size=2)  # `--num-prompts all`: every prompt past the skip that fits
    assert distill(smollm2, tmp_path / "he_all", every, progress=False) == 4
    assert [r[0] for r in read_dataset(tmp_path / "he_all")] == [p["id"] for p in load_prompts("humaneval", None)[160:]]
    with pytest.raises(UserError, match="only 0 humaneval prompts after the first 164 records fit 256 tokens; "
                                        "asked for all"):
        distill(smollm2, tmp_path / "none", dataclasses.replace(every, skip=164), progress=False)


@pytest.mark.parametrize("change, message", [(dict(dataset="imagenet"), "unknown dataset 'imagenet'"),
                                             (dict(skip=-1), "--skip must be >= 0"),
                                             (dict(turns="all"), "--turns must be first or followups"),
                                             (dict(turns="followups", dataset="gsm8k"), "needs a multi-turn dataset")])
def test_bad_prompt_sources_are_user_errors(change, message):
    with pytest.raises(UserError, match=message):
        DistillConfig(num_prompts=4, **change)


@pytest.mark.real_model
def test_cli_distills_several_datasets_each_into_its_folder(smollm2, smollm2_4_layers, tmp_path):
    """`--dataset gsm8k,humaneval`: one model load, out/<dataset> each, the same records as one dataset at a time."""
    from jspec.cli import main

    flags = ["--skip", "160", "--num-prompts", "2", "--max-prompt-tokens", "256", "--max-new-tokens", "3",
             "--batch-size", "2", "--shard-size", "2", "--dtype", "float32"]
    assert main(["train", "distill", "--model", str(smollm2_4_layers), "--dataset", "gsm8k,humaneval",
                 "--out", str(tmp_path / "tasks"), *flags]) == 0
    alone = DistillConfig(num_prompts=2, max_prompt_tokens=256, max_new_tokens=3, batch_size=2, shard_size=2,
                          dataset="gsm8k", skip=160)
    distill(smollm2, tmp_path / "alone", alone, progress=False)
    for (rid, tokens, mask), (rid_alone, tokens_alone, _) in zip(read_dataset(tmp_path / "tasks" / "gsm8k"),
                                                                 read_dataset(tmp_path / "alone"), strict=True):
        assert rid == rid_alone and np.array_equal(tokens, tokens_alone) and mask.any()
    assert [r[0] for r in read_dataset(tmp_path / "tasks" / "humaneval")] == \
        [p["id"] for p in load_prompts("humaneval", None)[160:162]]


@pytest.mark.parametrize("names, message", [("gsm8k,imagenet", "unknown dataset 'imagenet'"),
                                            ("gsm8k,gsm8k", "names a dataset twice"), (",", "names no dataset")])
def test_cli_rejects_bad_dataset_lists(names, message, tmp_path, capsys):
    from jspec.cli import main

    assert main(["train", "distill", "--dataset", names, "--out", str(tmp_path / "d")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_followup_turns_keep_the_conversation_before_each(tmp_path, monkeypatch):
    """Every user turn after the first, with the user and assistant turns before it; system and empty turns dropped;
    `skip` counts records."""
    from jspec import assets
    from jspec.bench.datasets import load_followup_turns

    def turn(role, content):
        return {"role": role, "content": content}

    long = [turn("system", "be brief"), turn("user", "q1"), turn("assistant", "a1"), turn("user", " "),
            turn("assistant", "a1b"), turn("user", "q2"), turn("assistant", "a2"), turn("user", "q3")]
    records = [{"id": "long", "prompt": "q1", "conversation": long},
               {"id": "single", "prompt": "q", "conversation": [turn("user", "q"), turn("assistant", "a")]},
               {"id": "pair", "prompt": "p1", "conversation": [turn("user", "p1"), turn("assistant", "b1"),
                                                               turn("user", "p2")]}]
    path = tmp_path / "sharegpt.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(assets, "dataset_path", lambda name: path)

    turns = list(load_followup_turns("sharegpt"))
    assert [t["id"] for t in turns] == ["long/turn2", "long/turn3", "pair/turn2"]
    assert turns[0]["messages"] == [turn("user", "q1"), turn("assistant", "a1"), turn("assistant", "a1b"),
                                    turn("user", "q2")]
    assert turns[1]["messages"] == turns[0]["messages"] + [turn("assistant", "a2"), turn("user", "q3")]
    assert turns[2]["messages"] == records[2]["conversation"]
    assert [t["id"] for t in load_followup_turns("sharegpt", skip=1)] == ["pair/turn2"]
    with pytest.raises(UserError, match="no multi-turn conversations"):
        next(load_followup_turns("gsm8k"))


@pytest.mark.real_model
def test_distill_followup_turns_answers_the_last_turn_after_its_history(smollm2, tmp_path):
    from jspec.bench.datasets import load_followup_turns

    cfg = DistillConfig(num_prompts=2, max_prompt_tokens=384, max_new_tokens=3, batch_size=2, shard_size=2,
                        turns="followups")
    out = tmp_path / "followups"
    assert distill(smollm2, out, cfg, progress=False) == 2
    fitting = (t for t in load_followup_turns("sharegpt")
               if len(smollm2.tokenizer.encode_chat(t["messages"])) <= 384)
    expected = [next(fitting) for _ in range(2)]
    records = list(read_dataset(out))
    assert [r[0] for r in records] == [t["id"] for t in expected]
    for (_, tokens, mask), turn in zip(records, expected, strict=True):
        prompt = tokens[: int(np.argmax(mask))].tolist()
        assert prompt == smollm2.tokenizer.encode_chat(turn["messages"])
        text = smollm2.tokenizer.decode(prompt, skip_special_tokens=False)
        assert text.count("<|im_start|>user") >= 2 and text.count("<|im_start|>assistant") >= 2
        assert text.endswith(turn["messages"][-1]["content"].strip() + "<|im_end|>\n<|im_start|>assistant\n")
    assert json.loads((out / "manifest.json").read_text())["config"]["turns"] == "followups"


def test_cli_rejects_followups_of_a_single_turn_dataset(tmp_path, capsys):
    from jspec.cli import main

    assert main(["train", "distill", "--dataset", "sharegpt,gsm8k", "--turns", "followups",
                 "--out", str(tmp_path / "d")]) == 2
    assert "needs a multi-turn dataset" in capsys.readouterr().err and not (tmp_path / "d").exists()


def _answers(folder, dataset, ids, turns=None):
    """A distillation folder holding one two-token answer per id (a manifest without "turns" is an older one's)."""
    from jspec.train.distill import FORMAT, _write_shard

    folder.mkdir(parents=True)
    _write_shard(folder / "shard-00000.npz", [(rid, [1, 2], [3, 4]) for rid in ids])
    config = {"dataset": dataset, **({"turns": turns} if turns else {})}
    (folder / "manifest.json").write_text(json.dumps({"format": FORMAT, "config": config, "shards": 1}))
    return folder


def test_records_past_starts_after_every_conversation_the_folders_answered(tmp_path, monkeypatch):
    """--after: the skip past the last record (file order) whose first or later turn a folder answered."""
    from jspec import assets
    from jspec.train.distill import records_past

    path = tmp_path / "sharegpt.jsonl"
    path.write_text("".join(json.dumps({"id": rid, "prompt": rid, "conversation": []}) + "\n" for rid in "abcdefg"))
    monkeypatch.setattr(assets, "dataset_path", lambda name: path)
    first = _answers(tmp_path / "first", "sharegpt", ["a", "c"], turns="first")
    later = _answers(tmp_path / "later", "sharegpt", ["b/turn2", "d/turn3", "d/turn4"], turns="followups")
    older = _answers(tmp_path / "older", "sharegpt", ["e"])
    assert records_past([first], "sharegpt") == 3
    assert records_past([later], "sharegpt") == 4
    assert records_past([first, later], "sharegpt") == 4
    assert records_past([older, first], "sharegpt") == 5
    with pytest.raises(UserError, match="holds answers to gsm8k prompts, not sharegpt"):
        records_past([_answers(tmp_path / "gsm8k", "gsm8k", ["1"], turns="first")], "sharegpt")
    with pytest.raises(UserError, match="record 'zz' is not in the installed sharegpt file"):
        records_past([_answers(tmp_path / "other", "sharegpt", ["zz"], turns="first")], "sharegpt")
    with pytest.raises(UserError, match="is not a distillation folder"):
        records_past([tmp_path], "sharegpt")


def test_cli_after_rejects_several_datasets(tmp_path, capsys):
    from jspec.cli import main

    assert main(["train", "distill", "--dataset", "gsm8k,humaneval", "--after", str(tmp_path),
                 "--out", str(tmp_path / "d")]) == 2
    assert "--after starts past the records of one dataset" in capsys.readouterr().err


@pytest.mark.real_model
def test_cli_distills_after_an_earlier_folder(smollm2, smollm2_4_layers, tmp_path):
    """`--after DATA`: the next prompts that fit, past the last record DATA answered."""
    from jspec.cli import main

    cfg = DistillConfig(num_prompts=2, max_prompt_tokens=128, max_new_tokens=2, batch_size=2, shard_size=2)
    distill(smollm2, tmp_path / "old", cfg, progress=False)
    old_ids = [r[0] for r in read_dataset(tmp_path / "old")]
    assert main(["train", "distill", "--model", str(smollm2_4_layers), "--after", str(tmp_path / "old"),
                 "--num-prompts", "2", "--max-prompt-tokens", "128", "--max-new-tokens", "2", "--batch-size", "2",
                 "--shard-size", "2", "--dtype", "float32", "--out", str(tmp_path / "new")]) == 0
    prompts = load_prompts("sharegpt", None)
    past = [p["id"] for p in prompts].index(old_ids[-1]) + 1
    fitting = (p["id"] for p in prompts[past:]
               if len(smollm2.tokenizer.encode_chat([{"role": "user", "content": p["prompt"]}])) <= 128)
    assert [r[0] for r in read_dataset(tmp_path / "new")] == [next(fitting), next(fitting)]
    assert json.loads((tmp_path / "new" / "manifest.json").read_text())["config"]["skip"] == past
