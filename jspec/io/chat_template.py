"""Chat templates: compiled to render like transformers' ``apply_chat_template``, and the end-of-turn ids they imply.

Rendering matches transformers: sandboxed Jinja, trim_blocks, lstrip_blocks, ``raise_exception``, ``strftime_now``,
a ``tojson`` that does not HTML-escape.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

import tokenizers

from jspec.errors import UserError

# End-of-turn markers that chat templates emit after each assistant message; when a template uses one of these
# and the vocabulary has it as an added token, generation must also stop on it.
_CHAT_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _GenerationBlock(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (used by some templates to mark assistant text): render as is."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise UserError(f"the model's chat template is not valid Jinja: {exc}") from exc


def chat_end_ids(template: str | None, tok: tokenizers.Tokenizer) -> list[int]:
    """Ids of the end-of-turn markers that `template` writes and `tok` has as added tokens."""
    if not template:
        return []
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    out = []
    for t in _CHAT_END_TOKENS:
        if t in template and t in added:
            tid = tok.token_to_id(t)
            if tid is not None:
                out.append(int(tid))
    return out
