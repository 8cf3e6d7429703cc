"""Benchmark prompts from the normalised dataset files installed by `jspec assets` (one chat message each)."""

import json

from jspec.errors import UserError

DATASETS = ("humaneval", "gsm8k", "mbpp", "mtbench", "alpaca", "xsum", "sharegpt")

# How each task is put to a chat model; the raw fields come from jspec/assets.py's normalisers.
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
