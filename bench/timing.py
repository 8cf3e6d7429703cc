"""Shared timing for the bench scripts: median wall time of a jitted call after a warm-up, results synchronised."""

import statistics
import time

import jax


def timed(f, *args, n: int = 20) -> float:
    """Median seconds of `f(*args)` over `n` calls, after one warm-up call (compilation excluded)."""
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)
