"""EAGLE-3's reduced draft vocabulary (`traineagle3/cnets.py::scandata`): the N target tokens most frequent where the
loss applies, sorted ascending; `d2t[i] = used[i] - i` (target id = draft id + d2t[draft id]) and `t2d[j] = j in used`.

Ties are broken towards the lower token id (EAGLE's `Counter.most_common` keeps first-seen order), so the vocabulary
depends only on the counts; tokens never seen fill the tail when fewer than N distinct ones occur.
"""

from collections.abc import Iterable

import numpy as np
from jaxtyping import Bool, Int

from jspec.errors import UserError


def token_counts(records: Iterable[tuple[Int[np.ndarray, " L"], Bool[np.ndarray, " L"]]],
                 vocab_size: int) -> Int[np.ndarray, " V"]:
    """How often each token id occurs at a loss-masked position of `(tokens, loss_mask)` records."""
    counts = np.zeros(vocab_size, np.int64)
    for tokens, loss_mask in records:
        ids = np.asarray(tokens)[np.asarray(loss_mask, bool)]
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        if bad.size:
            raise UserError(f"token id {int(bad[0])} outside a vocabulary of {vocab_size}")
        counts += np.bincount(ids, minlength=vocab_size)
    return counts


def select_draft_vocab(counts: Int[np.ndarray, " V"],
                       draft_vocab_size: int) -> tuple[Int[np.ndarray, " N"], Bool[np.ndarray, " V"]]:
    """(d2t int64 [N], t2d bool [V]) for the `draft_vocab_size` most frequent ids."""
    counts = np.asarray(counts)
    if not 0 < draft_vocab_size <= counts.size:
        raise UserError(f"draft vocab size {draft_vocab_size} must be in 1..{counts.size}")
    by_frequency = np.argsort(-counts, kind="stable")  # stable: equal counts keep ascending ids
    used = np.sort(by_frequency[:draft_vocab_size])
    t2d = np.zeros(counts.size, bool)
    t2d[used] = True
    return (used - np.arange(draft_vocab_size)).astype(np.int64), t2d


def build_draft_vocab(records: Iterable[tuple[Int[np.ndarray, " L"], Bool[np.ndarray, " L"]]], vocab_size: int,
                      draft_vocab_size: int) -> tuple[Int[np.ndarray, " N"], Bool[np.ndarray, " V"]]:
    """d2t / t2d from training records, e.g. `((t, m) for _, t, m in read_dataset(folder))`."""
    return select_draft_vocab(token_counts(records, vocab_size), draft_vocab_size)
