"""jspec.static_jit: static arguments hashed once per object, same compiled program, donation kept."""

import dataclasses

import jax.numpy as jnp
import pytest

from jspec.static_jit import HashedOnce, hashed_once, jit_hashing_once


@dataclasses.dataclass(frozen=True, eq=False)
class CountingStatic:
    """A static config that counts how often it is hashed."""

    scale: float
    hashes: list = dataclasses.field(default_factory=list)

    def __hash__(self):
        self.hashes.append(1)
        return hash(self.scale)

    def __eq__(self, other):
        return isinstance(other, CountingStatic) and other.scale == self.scale


def test_hashed_once_caches_by_identity():
    a, b = CountingStatic(2.0), CountingStatic(2.0)
    assert hashed_once(a) is hashed_once(a)
    assert len(a.hashes) == 1
    assert hashed_once(b) is not hashed_once(a)
    assert hashed_once(b) == hashed_once(a) and hash(hashed_once(b)) == hash(hashed_once(a))
    assert hashed_once(CountingStatic(3.0)) != hashed_once(a)
    assert HashedOnce(a) != a  # a wrapper only equals wrappers


def test_jit_hashes_each_object_once_and_reuses_the_program():
    traces = []

    @jit_hashing_once(static_argnames=("cfg", "power"), hashed_argnames=("cfg",), donate_argnames=("x",))
    def scaled(cfg, x, y, *, power):
        traces.append(1)
        return cfg.scale * x**power + y

    cfg = CountingStatic(2.0)
    for i in range(4):
        x = jnp.arange(4.0) + i
        out = scaled(cfg, x, jnp.ones(4), power=2)
        assert x.is_deleted()  # still donated
        assert out.tolist() == pytest.approx((2.0 * (jnp.arange(4.0) + i) ** 2 + 1).tolist())
    assert len(cfg.hashes) == 1 and len(traces) == 1
    # An equal object hashes once more but finds the compiled program; another value compiles anew.
    assert scaled(CountingStatic(2.0), jnp.ones(4), jnp.ones(4), power=2).tolist() == [3.0] * 4
    assert len(traces) == 1
    assert scaled(cfg=CountingStatic(5.0), x=jnp.ones(4), y=jnp.zeros(4), power=1).tolist() == [5.0] * 4
    assert len(traces) == 2


def test_hashed_arguments_must_be_static():
    with pytest.raises(ValueError, match="must be static"):
        jit_hashing_once(static_argnames=("a",), hashed_argnames=("b",))
