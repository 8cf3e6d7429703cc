"""bench/trace_summary.py on a hand-written perfetto trace: kernels grouped by name on the device's stream lines only,
busy time as the union of intervals, and clear errors for a missing trace or device."""

import gzip
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.trace_summary import format_table, summarize  # noqa: E402


def write_trace(root: pathlib.Path, events: list[dict]) -> None:
    folder = root / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    with gzip.open(folder / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)


def meta(pid, tid=None, name=""):
    if tid is None:
        return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}


def span(pid, tid, name, ts, dur):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}


def test_kernels_busy_and_idle(tmp_path):
    write_trace(tmp_path, [
        meta(1, name="/device:GPU:0"), meta(1, 7, "Stream #7(Compute)"), meta(1, 9, "XLA Ops"),
        meta(2, name="/host:CPU"),
        span(1, 7, "gemm", 0, 10), span(1, 7, "attn", 10, 5), span(1, 7, "gemm", 20, 10),  # idle 15..20
        span(1, 9, "fusion.1", 0, 30),  # an XLA Ops line spanning the kernels: not counted
        span(2, 1, "host work", 0, 100),
    ])
    summary = summarize(tmp_path)
    assert [(k.name, k.total_us, k.launches) for k in summary.kernels] == [("gemm", 20.0, 2), ("attn", 5.0, 1)]
    assert summary.busy_us == 25.0 and summary.span_us == 30.0
    table = format_table(summary, iterations=2)
    assert "| `gemm` | 10.0 | 1.00 | 80.0% |" in table
    assert "device busy 12.5 µs, span 15.0 µs (idle 16.7%), 1.5 launches" in table


def test_overlapping_kernels_count_once_in_busy_time(tmp_path):
    write_trace(tmp_path, [meta(1, name="/device:GPU:0"), meta(1, 1, "Stream #1"), meta(1, 2, "Stream #2"),
                           span(1, 1, "a", 0, 10), span(1, 2, "b", 5, 10)])
    summary = summarize(tmp_path)
    assert summary.busy_us == 15.0 and sum(k.total_us for k in summary.kernels) == 20.0


def test_missing_trace_or_device_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="perfetto_trace.json.gz"):
        summarize(tmp_path)
    write_trace(tmp_path, [meta(2, name="/host:CPU"), span(2, 1, "x", 0, 1)])
    with pytest.raises(ValueError, match="no process matches"):
        summarize(tmp_path)
