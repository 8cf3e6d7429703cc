"""Per-kernel device time from a `jax.profiler.trace(..., create_perfetto_trace=True)` directory.

    python bench/trace_summary.py TRACE_DIR --iterations 64     # table of the top kernels, µs per iteration

Used by `bench/step_breakdown.py --profile` to say where a step's device time goes: which kernels, how many launches,
and how much of the wall time the device sat idle between them (launch and dependency gaps).
"""

import argparse
import collections
import dataclasses
import gzip
import json
import pathlib
import re


@dataclasses.dataclass(frozen=True)
class KernelStats:
    name: str
    total_us: float
    launches: int


@dataclasses.dataclass(frozen=True)
class TraceSummary:
    kernels: list[KernelStats]  # largest total first
    busy_us: float  # union of the device intervals (overlapping kernels counted once)
    span_us: float  # first kernel start to last kernel end


def _events(trace_dir: pathlib.Path) -> list[dict]:
    files = sorted(trace_dir.rglob("perfetto_trace.json.gz"))
    if not files:
        raise FileNotFoundError(f"{trace_dir}: no perfetto_trace.json.gz (trace with create_perfetto_trace=True)")
    with gzip.open(files[-1]) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def summarize(trace_dir: str | pathlib.Path, device_pattern: str = r"/device:GPU:0") -> TraceSummary:
    """Complete events ('X') of the processes whose name matches `device_pattern`, grouped by kernel name."""
    events = _events(pathlib.Path(trace_dir))
    procs = {e["pid"]: e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    wanted = {pid for pid, name in procs.items() if re.search(device_pattern, name)}
    if not wanted:
        raise ValueError(f"no process matches {device_pattern!r} in the trace (have: {sorted(procs.values())})")
    # A GPU process also has "XLA Modules" / "XLA Ops" lines spanning the kernels: keep the stream lines only.
    threads = {(e["pid"], e["tid"]): e.get("args", {}).get("name", "") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") in wanted}
    streams = {key for key, name in threads.items() if name.startswith("Stream")}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), e["name"]) for e in events
                   if e.get("ph") == "X" and e.get("pid") in wanted
                   and (not streams or (e["pid"], e.get("tid")) in streams))
    if not spans:
        raise ValueError(f"the trace has no complete events on {device_pattern!r}")
    totals, counts = collections.defaultdict(float), collections.Counter()
    busy, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for start, end, name in spans:
        totals[name] += end - start
        counts[name] += 1
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    kernels = sorted((KernelStats(n, totals[n], counts[n]) for n in totals), key=lambda k: -k.total_us)
    return TraceSummary(kernels, busy, max(e for _, e, _ in spans) - spans[0][0])


def format_table(summary: TraceSummary, iterations: int, top: int = 25) -> str:
    """Markdown: the top kernels' µs and launches per iteration, then busy / span per iteration."""
    lines = ["| kernel | µs / iter | launches / iter | share of busy |", "|---|---|---|---|"]
    for k in summary.kernels[:top]:
        lines.append(f"| `{k.name[:80]}` | {k.total_us / iterations:.1f} | {k.launches / iterations:.2f} | "
                     f"{k.total_us / summary.busy_us:.1%} |")
    rest = summary.kernels[top:]
    if rest:
        lines.append(f"| ({len(rest)} more) | {sum(k.total_us for k in rest) / iterations:.1f} | "
                     f"{sum(k.launches for k in rest) / iterations:.2f} | |")
    launches = sum(k.launches for k in summary.kernels) / iterations
    lines.append(f"\nper iteration: device busy {summary.busy_us / iterations:.1f} µs, span "
                 f"{summary.span_us / iterations:.1f} µs (idle {1 - summary.busy_us / summary.span_us:.1%}), "
                 f"{launches:.1f} launches")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace_dir")
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--device", default=r"/device:GPU:0")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    print(format_table(summarize(args.trace_dir, args.device), args.iterations, args.top))


if __name__ == "__main__":
    main()
