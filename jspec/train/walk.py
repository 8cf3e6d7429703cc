"""Held-out MAT as the decode loop would see it: greedy speculative decoding replayed over held-out answers.

A drafter's held-out accept length averages its blocks over anchors drawn uniformly from the answers. The decode
loop does not visit positions uniformly: a step that accepts n drafts moves the next anchor n + 1 tokens on, so
easy stretches are crossed in a few long steps and hard ones in many short steps, and MAT (tokens over target
forwards) weights the hard positions more. Given the drafts a block anchored at each answer position would have
accepted (the data are the target's own greedy answers, so greedy decoding from the prompt commits exactly these
tokens), the loop's steps over each answer are a walk: the prefill commits the answer's first token, then each step
at anchor a moves to a + accepted[a] + 1 until the answer's last token is committed.
"""

import numpy as np
from jaxtyping import Bool, Int


def walk_steps(accepted: Int[np.ndarray, " T"], answer: Bool[np.ndarray, " T"]) -> tuple[int, int]:
    """(tokens, target forwards) of greedy speculative decoding over each run of answer tokens of one record, the
    prefill's forward included. `accepted[a]` is the number of drafts the block anchored at a accepts (answer
    positions only)."""
    tokens = forwards = 0
    positions = np.flatnonzero(answer)
    # Maximal runs of consecutive answer positions: one decode from its prompt each.
    for run in np.split(positions, np.flatnonzero(np.diff(positions) != 1) + 1) if len(positions) else []:
        first, last = int(run[0]), int(run[-1])
        tokens += last - first + 1
        forwards += 1  # the prefill commits the first answer token
        a = first
        while a < last:
            a += int(accepted[a]) + 1
            forwards += 1
    return tokens, forwards


def walk_mat(accepted: Int[np.ndarray, "R T"], loss_mask: Bool[np.ndarray, "R T"],
             segments: Int[np.ndarray, "R T"]) -> tuple[int, int, int, int]:
    """Over the records of packed rows: (tokens, forwards) of the walks, and (drafts accepted, blocks) over every
    answer position that opens a block (for the uniform-anchor mean)."""
    tokens = forwards = drafts = blocks = 0
    for r in range(accepted.shape[0]):
        for s in np.unique(segments[r][segments[r] != 0]):
            answer = loss_mask[r] & (segments[r] == s)
            t, f = walk_steps(accepted[r], answer)
            tokens, forwards = tokens + t, forwards + f
            opens = answer & np.concatenate([answer[1:], [False]])  # an answer token followed by one
            drafts, blocks = drafts + int(accepted[r][opens].sum()), blocks + int(opens.sum())
    return tokens, forwards, drafts, blocks
