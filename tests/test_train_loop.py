"""jspec.train.common.train_loop: the evaluation step's ahead-of-time compile runs beside the first steps and is
finished before the first evaluation; a failed one is a one-line warning, and training and evaluation go on."""

import dataclasses
import threading
import time

import numpy as np

from jspec.train import common


@dataclasses.dataclass(frozen=True)
class Loop:
    steps: int = 6
    lr: float = 1e-3
    warmup_steps: int = 1
    schedule: str = "cosine"
    eval_every: int = 3
    save_every: int = 100
    log_every: int = 2


class Batches:
    position = {"epoch": 0, "row": 0}

    def next(self):
        return {"tokens": np.zeros((1, 4), np.int32)}


def run(tmp_path, precompile, events):
    def evaluate(state):
        events.append(("eval", state))
        return {"loss": 1.0, "acc": [0.5]}

    def train_step(state, batch, lr, step):
        events.append(("step", step))
        return state + 1, {"loss": np.float32(1.0)}

    return common.train_loop(Loop(), step=0, state=0, batcher=Batches(),
                             metrics=common.MetricsLog(tmp_path / "metrics.jsonl", keep_until=0),
                             train_step=train_step, summarize=lambda pending: {"loss": 1.0, "acc": [0.5]},
                             evaluate=evaluate, save=lambda *a: None, stop_at=None, time_limit=None, progress=False,
                             desc="test", precompile=precompile)


def test_precompile_runs_beside_the_first_steps_and_ends_before_the_first_evaluation(tmp_path):
    events = []
    started = threading.Event()

    def precompile():
        started.set()
        time.sleep(0.3)  # a compile longer than the steps before the first evaluation
        events.append(("compiled", threading.current_thread().name))

    state, step, last = run(tmp_path, precompile, events)
    assert started.is_set() and (state, step, last) == (6, 6, {"loss": 1.0, "acc": [0.5]})
    names = [e[0] for e in events]
    assert names.count("compiled") == 1 and names.index("compiled") < names.index("eval")
    assert events[names.index("compiled")][1] == "precompile-eval"  # on its own thread
    assert [e for e in events if e[0] == "eval"] == [("eval", 3), ("eval", 6)]


def test_failed_precompile_warns_and_training_goes_on(tmp_path, capsys):
    events = []

    def precompile():
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory while compiling")

    assert run(tmp_path, precompile, events)[:2] == (6, 6)
    assert [e for e in events if e[0] == "eval"] == [("eval", 3), ("eval", 6)]
    err = capsys.readouterr().err
    assert "compiling the evaluation step ahead of time failed" in err and "RESOURCE_EXHAUSTED" in err
    assert "Traceback" not in err
