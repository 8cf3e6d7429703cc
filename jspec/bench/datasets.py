"""Benchmark prompts from the normalised dataset files installed by `jspec assets` (one chat message each), and the
later turns of multi-turn conversations (ShareGPT's) for drafter training data."""

import itertools
import json
from collections.abc import Iterator

from jspec.errors import UserError

DATASETS = ("humaneval", "gsm8k", "mbpp", "mtbench", "alpaca", "xsum", "sharegpt")
MULTI_TURN = ("sharegpt",)  # records that keep the whole conversation (the normalisers' "conversation" field)

# How each task is put to a chat model; the raw fields come from jspec/assets/normalisers.py.
_TEMPLATES = {
    "humaneval": "Complete the following Python function.\n\n```python\n{prompt}```",
    "gsm8k": "{prompt}\nSolve the problem step by step, then give the final answer.",
    "mbpp": "{prompt}\nWrite a Python function that solves this task.",
    "mtbench": "{prompt}",
    "alpaca": "{prompt}",
    "xsum": "Summarize the following article in one sentence.\n\n{prompt}",
    "sharegpt": "{prompt}",
}


def load_prompts(name: str, limit: int | None = None) -> list[dict]:
    """[{"id", "prompt"}] with the task instruction applied, the first `limit` records in file order."""
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    from jspec import assets

    path = assets.dataset_path(name)
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            out.append({"id": str(rec["id"]), "prompt": _TEMPLATES[name].format(prompt=rec["prompt"])})
            if limit is not None and len(out) >= limit:
                break
    return out


def load_followup_turns(name: str, skip: int = 0) -> Iterator[dict]:
    """{"id", "messages"} for each non-empty user turn after a conversation's first, in file order, from the records
    past the first `skip`. `messages` is the conversation up to and including that turn, its non-empty user and
    assistant turns only; the id is the record's with "/turn<k>" (k counts those user turns from 1: k >= 2 here)."""
    if name not in MULTI_TURN:
        raise UserError(f"{name!r} has no multi-turn conversations; follow-up turns come from {', '.join(MULTI_TURN)}")
    from jspec import assets

    with open(assets.dataset_path(name), encoding="utf-8") as f:
        for line in itertools.islice(f, skip, None):
            rec = json.loads(line)
            turns = [t for t in rec["conversation"] if t["role"] in ("user", "assistant") and t["content"].strip()]
            asks = [i for i, t in enumerate(turns) if t["role"] == "user"]
            for k, i in enumerate(asks[1:], start=2):
                yield {"id": f"{rec['id']}/turn{k}", "messages": turns[: i + 1]}
