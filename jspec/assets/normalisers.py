"""Normalisers: each turns one upstream data file (bytes) into a dataset's records, each with an "id" and a "prompt".

manifest.yaml names a dataset's normaliser by its key in NORMALISERS.
"""

import collections
import json
import re
from collections.abc import Callable, Iterator
from typing import Any


def _jsonl(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.decode("utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def _fields(id_key: str, prompt_key: str, *keep: str,
            wrapper: str | None = None) -> Callable[[bytes], Iterator[dict[str, Any]]]:
    """A jsonl normaliser: "id" from `id_key` (as a string), "prompt" from `prompt_key`, and the `keep` fields as they
    are, all read from each line's example (the line itself, or its `wrapper` field)."""

    def normalise(data: bytes) -> Iterator[dict[str, Any]]:
        for line in _jsonl(data):
            example = line[wrapper] if wrapper else line
            yield {"id": str(example[id_key]), "prompt": example[prompt_key], **{k: example[k] for k in keep}}

    return normalise


_humaneval = _fields("task_id", "prompt", "entry_point", "canonical_solution", "test")
# GSM8K and MBPP come wrapped in oe-eval request dumps: the example is `doc`; `request.context` is a few-shot prompt.
_gsm8k = _fields("id", "question", "answer", "short_answer", wrapper="doc")
_mbpp = _fields("task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list", wrapper="doc")
_xsum = _fields("id", "document", "summary")


def _mtbench(data: bytes) -> Iterator[dict[str, Any]]:
    for r in _jsonl(data):
        yield {"id": str(r["question_id"]), "prompt": r["turns"][0], "category": r["category"], "turns": r["turns"]}


def _alpaca(data: bytes) -> Iterator[dict[str, Any]]:
    for i, r in enumerate(json.loads(data)):
        yield {"id": str(i), "prompt": r["instruction"], "dataset": r["dataset"], "reference_output": r["output"]}


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


def _sharegpt(data: bytes) -> Iterator[dict[str, Any]]:
    """Complete conversations with a non-empty user turn; repeated ids (the split file has some) get a #n suffix."""
    seen: collections.Counter[str] = collections.Counter()
    for record in _complete_array_items(data.decode("utf-8")):
        turns = [
            {"role": _SHAREGPT_ROLES.get(t["from"], t["from"]), "content": t["value"]} for t in record["conversations"]
        ]
        prompt = next((t["content"] for t in turns if t["role"] == "user"), "")
        if not prompt.strip():
            continue
        seen[record["id"]] += 1
        n = seen[record["id"]]
        yield {"id": record["id"] if n == 1 else f"{record['id']}#{n}", "prompt": prompt, "conversation": turns}


_ARRAY_SEPARATOR = re.compile(r"[\s,]*")


def _complete_array_items(text: str) -> Iterator[Any]:
    """Items of a top-level JSON array, stopping at the first incomplete one (the shipped ShareGPT file is cut off)."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        pos = _ARRAY_SEPARATOR.match(text, pos).end()
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return
        yield item


NORMALISERS: dict[str, Callable[[bytes], Iterator[dict[str, Any]]]] = {
    "humaneval": _humaneval,
    "gsm8k": _gsm8k,
    "mbpp": _mbpp,
    "mtbench": _mtbench,
    "alpaca": _alpaca,
    "xsum": _xsum,
    "sharegpt": _sharegpt,
}
