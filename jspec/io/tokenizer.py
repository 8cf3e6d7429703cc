"""Tokenizers for jspec models: a `tokenizers.Tokenizer` plus the special-token and chat-template metadata.

Only the `tokenizers` library is used (no transformers/torch). A Tokenizer is built from GGUF metadata
(gguf_tokenizer) or from a Hugging Face tokenizer directory (hf_tokenizer); chat templates render as in
transformers (chat_template).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

import tokenizers

from jspec.errors import UserError
from jspec.io import gguf_tokenizer, hf_tokenizer
from jspec.io.atomic_text import atomic_write_text
from jspec.io.chat_template import compile_template
from jspec.io.gguf_tokenizer import SUPPORTED_GGUF_PRE

__all__ = ["Tokenizer", "SUPPORTED_GGUF_PRE"]


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the special-token and chat-template metadata a model needs."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        *,
        eos_token_ids: Sequence[int],
        bos_token_id: int | None,
        add_bos: bool,
        chat_template: str | None,
        vocab_size: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids: tuple[int, ...] = tuple(int(i) for i in eos_token_ids)
        self.bos_token_id: int | None = None if bos_token_id is None else int(bos_token_id)
        self.add_bos: bool = bool(add_bos)
        self.chat_template: str | None = chat_template or None
        self.vocab_size: int = int(vocab_size) if vocab_size is not None else tokenizer.get_vocab_size(True)
        if self.add_bos and self.bos_token_id is None:
            raise UserError("the tokenizer asks for a BOS token but defines none")

    # ------------------------------------------------------------------ basic properties

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids}, "
            f"bos_token_id={self.bos_token_id}, add_bos={self.add_bos}, chat_template={self.chat_template is not None})"
        )

    @property
    def eos_token_id(self) -> int | None:
        """The primary end-of-sequence id (the first of `eos_token_ids`)."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @property
    def bos_token(self) -> str | None:
        return self.id_to_token(self.bos_token_id) if self.bos_token_id is not None else None

    @property
    def eos_token(self) -> str | None:
        return self.id_to_token(self.eos_token_ids[0]) if self.eos_token_ids else None

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.tokenizer.id_to_token(int(token_id))

    # ------------------------------------------------------------------ encode / decode

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`; a BOS id is prepended only if the model wants one (or `add_bos` says so).

        Special tokens written in the text (e.g. ``<|im_start|>``) are matched as single tokens, as in
        transformers and in llama.cpp with ``parse_special``.
        """
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        want_bos = self.add_bos if add_bos is None else add_bos
        if want_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool | None = None) -> list[list[int]]:
        encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        want_bos = self.add_bos if add_bos is None else add_bos
        prefix = [self.bos_token_id] if want_bos and self.bos_token_id is not None else []
        return [prefix + e.ids for e in encs]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ chat

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """Render `messages` with the model's Jinja chat template, the way transformers does."""
        if self.chat_template is None:
            raise UserError("this model has no chat template; use a plain prompt (chat=False)")
        template = compile_template(self.chat_template)
        variables: dict[str, Any] = {}
        if self.bos_token is not None:
            variables["bos_token"] = self.bos_token
        if self.eos_token is not None:
            variables["eos_token"] = self.eos_token
        variables.update(kwargs)
        try:
            return template.render(
                messages=messages,
                tools=tools,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except Exception as exc:  # jinja2 TemplateError, or an error raised by the template itself
            raise UserError(f"chat template failed to render: {exc}") from exc

    def encode_chat(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any
    ) -> list[int]:
        """Token ids of a rendered conversation; BOS is added (if the model wants one) only when the template
        did not already write it."""
        rendered = self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        bos = self.bos_token
        add_bos = self.add_bos and not (bos is not None and rendered.startswith(bos))
        return self.encode(rendered, add_bos=add_bos)

    def render_prompt(self, text: str, chat: bool) -> list[int]:
        """Token ids for a single user prompt: through the chat template when `chat` and one exists."""
        if not (chat and self.chat_template is not None):
            return self.encode(text)
        return self.encode_chat([{"role": "user", "content": text}], add_generation_prompt=True)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], *, use_cache: bool = True) -> Tokenizer:
        """Build the tokenizer from a GGUF file's metadata (cached next to the file as `<path>.tokenizer.json`)."""
        return gguf_tokenizer.load(cls, pathlib.Path(path), use_cache=use_cache)

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load `tokenizer.json` + `tokenizer_config.json` (+ generation_config.json / config.json eos ids)."""
        return hf_tokenizer.load(cls, pathlib.Path(path))

    # ------------------------------------------------------------------ export

    def save_hf(self, directory: str | os.PathLike[str]) -> pathlib.Path:
        """Write tokenizer.json + tokenizer_config.json so transformers' AutoTokenizer can load the directory.

        Also writes generation_config.json with the eos ids, unless the directory already has one.
        """
        d = pathlib.Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_text(d / "tokenizer.json", self.tokenizer.to_str(pretty=False))
        added_decoder = {
            str(tid): {
                "content": t.content,
                "lstrip": t.lstrip,
                "normalized": t.normalized,
                "rstrip": t.rstrip,
                "single_word": t.single_word,
                "special": t.special,
            }
            for tid, t in sorted(self.tokenizer.get_added_tokens_decoder().items())
        }
        cfg: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "add_bos_token": self.add_bos,
            "add_eos_token": False,
            "added_tokens_decoder": added_decoder,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 1_000_000_000,
        }
        if self.chat_template is not None:
            cfg["chat_template"] = self.chat_template
        atomic_write_text(d / "tokenizer_config.json", json.dumps(cfg, indent=2, ensure_ascii=False))
        gen = d / "generation_config.json"
        if not gen.exists():
            gen_cfg: dict[str, Any] = {"eos_token_id": list(self.eos_token_ids)}
            if self.bos_token_id is not None:
                gen_cfg["bos_token_id"] = self.bos_token_id
            atomic_write_text(gen, json.dumps(gen_cfg, indent=2))
        return d
