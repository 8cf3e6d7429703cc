"""A tokenizer loaded from a Hugging Face directory: tokenizer.json plus the config files that name its special tokens.

Functions take the Tokenizer class as `cls` so this module need not import jspec.io.tokenizer, which imports it.
"""

from __future__ import annotations

import json
import pathlib
from typing import TYPE_CHECKING, Any

import tokenizers

from jspec.errors import UserError
from jspec.io.chat_template import chat_end_ids

if TYPE_CHECKING:
    from jspec.io.tokenizer import Tokenizer


def load(cls: type[Tokenizer], path: pathlib.Path) -> Tokenizer:
    """Load `tokenizer.json` + `tokenizer_config.json` (+ generation_config.json / config.json eos ids)."""
    tj = path / "tokenizer.json"
    if not tj.is_file():
        raise UserError(f"{path} has no tokenizer.json (only fast tokenizers are supported)")
    try:
        tok = tokenizers.Tokenizer.from_file(str(tj))
    except Exception as exc:
        raise UserError(f"cannot load {tj}: {exc}") from exc
    cfg = _read_json(path / "tokenizer_config.json")
    gen_cfg = _read_json(path / "generation_config.json")
    model_cfg = _read_json(path / "config.json")

    def tok_id(value: Any) -> int | None:
        if isinstance(value, dict):
            value = value.get("content")
        return tok.token_to_id(value) if isinstance(value, str) else None

    chat_template = _chat_template(path, cfg)

    bos_id = tok_id(cfg.get("bos_token"))
    if bos_id is None:
        for c in (gen_cfg, model_cfg):
            if isinstance(c.get("bos_token_id"), int):
                bos_id = c["bos_token_id"]
                break

    eos: list[int] = []
    eid = tok_id(cfg.get("eos_token"))
    if eid is not None:
        eos.append(eid)
    for c in (gen_cfg, model_cfg):
        eos.extend(_as_id_list(c.get("eos_token_id")))
    eos.extend(chat_end_ids(chat_template, tok))

    if "add_bos_token" in cfg:
        add_bos = bool(cfg["add_bos_token"]) and bos_id is not None
    else:
        # No explicit flag: follow the post-processor in tokenizer.json.
        probe = tok.encode("a", add_special_tokens=True).ids
        add_bos = bos_id is not None and len(probe) > 0 and probe[0] == bos_id
    return cls(
        tok,
        eos_token_ids=list(dict.fromkeys(eos)),
        bos_token_id=bos_id,
        add_bos=add_bos,
        chat_template=chat_template,
    )


def _chat_template(path: pathlib.Path, cfg: dict[str, Any]) -> str | None:
    tmpl: Any = cfg.get("chat_template")
    if tmpl is None and (path / "chat_template.jinja").is_file():
        tmpl = (path / "chat_template.jinja").read_text(encoding="utf-8")
    if tmpl is None:
        tmpl = _read_json(path / "chat_template.json").get("chat_template")
    if isinstance(tmpl, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default")
    return tmpl if isinstance(tmpl, str) and tmpl else None


def _as_id_list(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot parse {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}
