"""`jax.jit` whose costly static arguments are hashed once per object instead of once per call.

jit hashes every static argument on every call to look up its compiled program. An `nnx.GraphDef` (or a method
holding a drafter's GraphDef) takes about 1 ms to hash on a CPU host, twice per prompt (prefill, then the decode
loop). `jit_hashing_once` wraps the named arguments in `HashedOnce` objects, cached by identity, so that a repeated
call with the same object pays one dict lookup, and equality starts with an identity check.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax

_CACHE_SIZE = 64  # distinct objects remembered; a bench holds a handful (target graphdef, a few methods)


class HashedOnce:
    """A static jit argument with its hash computed once."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: Any):
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashedOnce) and (self.value is other.value or self.value == other.value)


# id -> (object, wrapper): holding the object keeps its id from being reused while it is cached.
_cache: dict[int, tuple[Any, HashedOnce]] = {}


def hashed_once(value: Any) -> HashedOnce:
    """The cached wrapper of `value` (built, and its hash computed, on first sight)."""
    hit = _cache.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))  # oldest first
    wrapped = HashedOnce(value)
    _cache[id(value)] = (value, wrapped)
    return wrapped


def jit_hashing_once(*, static_argnames: tuple[str, ...], hashed_argnames: tuple[str, ...],
                     donate_argnames: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """`jax.jit(fun, static_argnames=..., donate_argnames=...)`, with the static arguments of `hashed_argnames`
    passed through `hashed_once`; `fun` itself sees the plain objects."""
    if not set(hashed_argnames) <= set(static_argnames):
        raise ValueError(f"hashed_argnames {hashed_argnames} must be static ({static_argnames})")

    def decorate(fun: Callable) -> Callable:
        sig = inspect.signature(fun)

        def unwrapped(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            for name in hashed_argnames:
                bound.arguments[name] = bound.arguments[name].value
            return fun(*bound.args, **bound.kwargs)

        unwrapped.__signature__ = sig  # jit resolves argument names through it
        jitted = jax.jit(unwrapped, static_argnames=static_argnames, donate_argnames=donate_argnames)

        @functools.wraps(fun)
        def call(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            for name in hashed_argnames:
                bound.arguments[name] = hashed_once(bound.arguments[name])
            return jitted(*bound.args, **bound.kwargs)

        return call

    return decorate
