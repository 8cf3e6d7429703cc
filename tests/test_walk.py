"""The decode loop's walk over held-out answers (jspec.train.walk), on hand-made acceptance counts."""

import numpy as np

from jspec.train.walk import walk_mat, walk_steps


def test_each_step_moves_past_its_accepted_drafts_and_the_bonus():
    answer = np.zeros(12, bool)
    answer[3:10] = True  # 7 answer tokens, positions 3 .. 9
    accepted = np.zeros(12, int)
    accepted[[3, 6, 7]] = [2, 0, 1]  # 3 -> 6 -> 7 -> 9: the last token is committed
    accepted[[4, 5, 8]] = 5  # skipped over: never read
    assert walk_steps(accepted, answer) == (7, 4)  # the prefill + 3 steps
    accepted[3] = 6  # all 6 remaining tokens at once
    assert walk_steps(accepted, answer) == (7, 2)
    assert walk_steps(accepted, np.zeros(12, bool)) == (0, 0)


def test_records_and_answer_runs_are_walked_apart():
    # Row 0: record 1 = prompt 0..1 + answer 2..4, record 2 = prompt 5 + answers 6..7 and 9..10 (two runs).
    segments = np.array([[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0]])
    mask = np.array([[0, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0]], bool)
    accepted = np.array([[9, 9, 1, 0, 9, 9, 1, 9, 9, 0, 9, 9]])
    tokens, forwards, drafts, blocks = walk_mat(accepted, mask, segments)
    # record 1: 2 -> 4 (2 forwards, 3 tokens); record 2: 6 -> 8 (2 forwards, 2 tokens), 9 -> 10 (2 forwards, 2).
    assert (tokens, forwards) == (7, 6)
    # Blocks open at 2, 3 (record 1), 6 and 9 (record 2): 1 + 0 + 1 + 0 drafts.
    assert (drafts, blocks) == (2, 4)
