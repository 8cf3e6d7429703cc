"""Decoding methods by name. Each is a frozen dataclass (static config) with a state pytree; see methods/base.py."""

from jspec.errors import UserError
from jspec.methods.base import Method
from jspec.methods.pld import PromptLookup

ALL_METHODS = ("vanilla", "pld", "token_recycling", "draft_model", "eagle3", "eagle3_pruned", "graft", "dflash",
               "domino", "graft_tail")


def available() -> dict[str, type[Method]]:
    return {"vanilla": Method, "pld": PromptLookup}


def get_method(name: str, **options) -> Method:
    """A method instance; options are the dataclass fields it accepts (unknown ones are an error)."""
    methods = available()
    if name not in ALL_METHODS:
        raise UserError(f"unknown method {name!r}; expected one of {', '.join(ALL_METHODS)}")
    if name not in methods:
        raise UserError(f"method {name!r} is not available yet in this version; available: {', '.join(methods)}")
    cls = methods[name]
    fields = set(cls.__dataclass_fields__) - {"name"}
    unknown = set(options) - fields
    if unknown:
        raise UserError(f"method {name!r} does not take option(s) {sorted(unknown)}")
    return cls(**options)
