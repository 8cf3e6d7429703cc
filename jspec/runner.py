"""Run one batch of token-id prompts with a method and return the per-prompt result records of the CLI contract."""

import time
from typing import Any

from jspec.decode import generate
from jspec.methods import Method
from jspec.models.loading import LoadedModel
from jspec.sampling import Sampling
from jspec.spec_decode import speculative_generate


def run_batch(model: LoadedModel, method: Method, prompts: list[list[int]], *, max_new_tokens: int,
              sampling: Sampling, seed: int, max_cache_len: int, method_params: Any = (), method_state: Any = None,
              pad_to: int | None = None) -> tuple[list[dict], Any]:
    """Records `{tokens, steps, accepted, mat, new_tokens, seconds, tok_per_s, prefill_seconds, loop_seconds}` per
    prompt, and the method state.

    `vanilla` takes the plain decode loop (one target forward per token, no tree bookkeeping); every other method
    goes through the speculative loop. `seconds` is the wall time of the whole batch call, `prefill_seconds` and
    `loop_seconds` its jitted prefill and decode loop (the rest is host work: padding, state set-up, transfers).
    """
    t0 = time.perf_counter()
    kwargs = dict(max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=model.eos_token_ids, seed=seed,
                  max_cache_len=max_cache_len, pad_to=pad_to)
    if type(method) is Method:
        res = generate(model.graphdef, model.params, prompts, **kwargs)
        accepted = [[1] * len(t) for t in res.tokens]
    else:
        res = speculative_generate(model.graphdef, model.params, prompts, method=method, method_params=method_params,
                                   method_state=method_state, **kwargs)
        accepted, method_state = res.accepted, res.method_state
    seconds = time.perf_counter() - t0
    records = []
    for tokens, acc in zip(res.tokens, accepted):
        records.append({"tokens": tokens, "steps": len(acc), "accepted": acc, "mat": len(tokens) / max(len(acc), 1),
                        "new_tokens": len(tokens), "seconds": seconds,
                        "tok_per_s": len(tokens) / seconds if seconds > 0 else 0.0,
                        "prefill_seconds": res.prefill_seconds, "loop_seconds": res.decode_seconds})
    return records, method_state
