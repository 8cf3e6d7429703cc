"""Tokenizers for jspec models, built from GGUF metadata or from a Hugging Face tokenizer directory.

Only the `tokenizers` library is used (no transformers/torch). From a GGUF file we rebuild a byte-level BPE
tokenizer that reproduces llama.cpp's pre-tokenization for the supported `tokenizer.ggml.pre` types:

* ``smollm``: every digit is split off on its own (``\\p{N}``) before the GPT-2 regex. This is the split that
  transformers' own GGUF conversion leaves out, so whitespace before digits tokenizes differently there.
* ``qwen2``: Qwen2's regex split, then byte-level mapping without a regex. Qwen's reference tokenizer also
  applies NFC normalization, which we do as well (llama.cpp does not; it only matters for non-NFC input).

Chat templates are rendered like transformers' ``apply_chat_template`` (sandboxed Jinja, trim_blocks,
lstrip_blocks, ``raise_exception``, ``strftime_now``, a ``tojson`` that does not HTML-escape).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import pathlib
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

from jspec.errors import UserError

__all__ = ["Tokenizer", "SUPPORTED_GGUF_PRE"]

# GGUF token types (llama.cpp's llama_token_type).
_TT_NORMAL, _TT_UNKNOWN, _TT_CONTROL, _TT_USER_DEFINED, _TT_UNUSED, _TT_BYTE = 1, 2, 3, 4, 5, 6

_QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

SUPPORTED_GGUF_PRE = ("smollm", "qwen2")

# End-of-turn markers that chat templates emit after each assistant message; when a template uses one of these
# and the vocabulary has it as an added token, generation must also stop on it.
_CHAT_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")

# Bump when the GGUF -> tokenizer conversion changes, so stale caches are rebuilt.
_CACHE_VERSION = 1


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
        template = _compile_template(self.chat_template)
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
        path = pathlib.Path(path)
        try:
            st = path.stat()
        except OSError as exc:
            raise UserError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from exc
        key = {"version": _CACHE_VERSION, "gguf_size": st.st_size, "gguf_mtime_ns": st.st_mtime_ns}
        tok_path, meta_path = _cache_paths(path)
        if use_cache:
            cached = _load_cache(tok_path, meta_path, key)
            if cached is not None:
                return cached
        tok = _build_from_gguf(path)
        if use_cache:
            _write_cache(tok, tok_path, meta_path, key)
        return tok

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load `tokenizer.json` + `tokenizer_config.json` (+ generation_config.json / config.json eos ids)."""
        path = pathlib.Path(path)
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

        chat_template = _hf_chat_template(path, cfg)

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
        eos.extend(_chat_end_ids(chat_template, tok.token_to_id, _added_contents(tok)))

        if "add_bos_token" in cfg:
            add_bos = bool(cfg["add_bos_token"]) and bos_id is not None
        else:
            # No explicit flag: follow the post-processor in tokenizer.json.
            probe = tok.encode("a", add_special_tokens=True).ids
            add_bos = bos_id is not None and len(probe) > 0 and probe[0] == bos_id
        return cls(
            tok,
            eos_token_ids=_dedupe(eos),
            bos_token_id=bos_id,
            add_bos=add_bos,
            chat_template=chat_template,
        )

    # ------------------------------------------------------------------ export

    def save_hf(self, directory: str | os.PathLike[str]) -> pathlib.Path:
        """Write tokenizer.json + tokenizer_config.json so transformers' AutoTokenizer can load the directory.

        Also writes generation_config.json with the eos ids, unless the directory already has one.
        """
        d = pathlib.Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(d / "tokenizer.json", self.tokenizer.to_str(pretty=False))
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
        _atomic_write_text(d / "tokenizer_config.json", json.dumps(cfg, indent=2, ensure_ascii=False))
        gen = d / "generation_config.json"
        if not gen.exists():
            gen_cfg: dict[str, Any] = {"eos_token_id": list(self.eos_token_ids)}
            if self.bos_token_id is not None:
                gen_cfg["bos_token_id"] = self.bos_token_id
            _atomic_write_text(gen, json.dumps(gen_cfg, indent=2))
        return d


# ====================================================================== GGUF conversion


def _build_from_gguf(path: pathlib.Path) -> Tokenizer:
    meta = _read_gguf_tokenizer_fields(path)
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise UserError(f"{path}: the GGUF has no tokenizer (tokenizer.ggml.model is missing)")
    if model != "gpt2":
        raise UserError(
            f"{path}: unsupported GGUF tokenizer type tokenizer.ggml.model={model!r}; "
            "jspec supports byte-level BPE ('gpt2') tokenizers only"
        )
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in SUPPORTED_GGUF_PRE:
        raise UserError(
            f"{path}: unsupported GGUF pre-tokenizer tokenizer.ggml.pre={pre!r}; "
            f"supported: {', '.join(SUPPORTED_GGUF_PRE)}"
        )
    tokens: list[str] = meta.get("tokenizer.ggml.tokens") or []
    merges_raw: list[str] = meta.get("tokenizer.ggml.merges") or []
    if not tokens or not merges_raw:
        raise UserError(f"{path}: the GGUF tokenizer has no tokens or no merges")
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [_TT_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise UserError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")

    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)  # a duplicated string keeps its first id (llama.cpp does the same)
    merges: list[tuple[str, str]] = []
    for m in merges_raw:
        cut = m.find(" ", 1)
        if cut < 0:
            raise UserError(f"{path}: malformed merge {m!r} in tokenizer.ggml.merges")
        merges.append((m[:cut], m[cut + 1 :]))
    try:
        bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    except Exception as exc:
        raise UserError(f"{path}: cannot build a BPE model from the GGUF vocabulary: {exc}") from exc
    tok = tokenizers.Tokenizer(bpe)

    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:  # qwen2
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_QWEN2_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()

    # Control tokens are special (dropped by decode(skip_special_tokens=True)); user-defined ones are not, but
    # both are matched whole in the input and never split by BPE. Registering in id order keeps ids stable.
    for i, (t, tt) in enumerate(zip(tokens, types)):
        if tt not in (_TT_CONTROL, _TT_USER_DEFINED) or vocab.get(t) != i:
            continue
        added = AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False,
                           special=tt == _TT_CONTROL)
        if tt == _TT_CONTROL:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])

    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    eos_id = meta.get("tokenizer.ggml.eos_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False)) and bos_id is not None
    chat_template = meta.get("tokenizer.chat_template")
    for name, v in (("bos", bos_id), ("eos", eos_id)):
        if v is not None and not 0 <= int(v) < len(tokens):
            raise UserError(f"{path}: tokenizer.ggml.{name}_token_id={v} is outside the vocabulary")

    if add_bos:
        bos = tokens[int(bos_id)]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1", special_tokens=[(bos, int(bos_id))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    added = _added_contents(tok)
    eos: list[int] = [int(eos_id)] if eos_id is not None else []
    eos.extend(_chat_end_ids(chat_template, tok.token_to_id, added))
    if pre == "qwen2":
        eot = tok.token_to_id("<|endoftext|>")
        if eot is not None:
            eos.append(eot)
    return Tokenizer(
        tok,
        eos_token_ids=_dedupe(eos),
        bos_token_id=None if bos_id is None else int(bos_id),
        add_bos=add_bos,
        chat_template=chat_template,
        vocab_size=len(tokens),
    )


_WANTED_FIELDS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
)


def _read_gguf_tokenizer_fields(path: pathlib.Path) -> dict[str, Any]:
    from gguf import GGUFReader  # imported lazily: only needed when the cache is cold

    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:
        raise UserError(f"{path} is not a readable GGUF file: {exc}") from exc
    out: dict[str, Any] = {}
    for name in _WANTED_FIELDS:
        field = reader.get_field(name)
        if field is None:
            continue
        out[name] = field.contents()
    for name in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        if name in out and not isinstance(out[name], list):
            raise UserError(f"{path}: {name} is not an array")
    if "tokenizer.ggml.token_type" in out:
        out["tokenizer.ggml.token_type"] = [int(t) for t in out["tokenizer.ggml.token_type"]]
    return out


# ====================================================================== cache


def _cache_paths(gguf: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    return gguf.with_name(gguf.name + ".tokenizer.json"), gguf.with_name(gguf.name + ".tokenizer_meta.json")


def _load_cache(tok_path: pathlib.Path, meta_path: pathlib.Path, key: dict[str, Any]) -> Tokenizer | None:
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("key") != key:
            return None
        raw = tok_path.read_bytes()
        if hashlib.sha256(raw).hexdigest() != meta.get("tokenizer_sha256"):
            return None
        tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        return Tokenizer(
            tok,
            eos_token_ids=meta["eos_token_ids"],
            bos_token_id=meta["bos_token_id"],
            add_bos=meta["add_bos"],
            chat_template=meta["chat_template"],
            vocab_size=meta["vocab_size"],
        )
    except Exception:  # missing, stale, partial or corrupt cache: rebuild
        return None


def _write_cache(tok: Tokenizer, tok_path: pathlib.Path, meta_path: pathlib.Path, key: dict[str, Any]) -> None:
    raw = tok.tokenizer.to_str(pretty=False)
    meta = {
        "key": key,
        "tokenizer_sha256": hashlib.sha256(raw.encode("utf-8")).hexdigest(),
        "eos_token_ids": list(tok.eos_token_ids),
        "bos_token_id": tok.bos_token_id,
        "add_bos": tok.add_bos,
        "chat_template": tok.chat_template,
        "vocab_size": tok.vocab_size,
    }
    try:
        # The sidecar goes last and names the tokenizer.json hash, so a reader never trusts a half-written pair.
        _atomic_write_text(tok_path, raw)
        _atomic_write_text(meta_path, json.dumps(meta, indent=1, ensure_ascii=False))
    except OSError:
        pass  # read-only location: work without a cache


def _atomic_write_text(path: pathlib.Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the files are meant to be shared like the GGUF
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ====================================================================== chat templates


@functools.lru_cache(maxsize=16)
def _compile_template(source: str) -> Any:
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


def _hf_chat_template(path: pathlib.Path, cfg: dict[str, Any]) -> str | None:
    tmpl: Any = cfg.get("chat_template")
    if tmpl is None and (path / "chat_template.jinja").is_file():
        tmpl = (path / "chat_template.jinja").read_text(encoding="utf-8")
    if tmpl is None:
        tmpl = _read_json(path / "chat_template.json").get("chat_template")
    if isinstance(tmpl, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default")
    return tmpl if isinstance(tmpl, str) and tmpl else None


def _chat_end_ids(template: str | None, token_to_id: Any, added: set[str]) -> list[int]:
    if not template:
        return []
    out = []
    for t in _CHAT_END_TOKENS:
        if t in template and t in added:
            tid = token_to_id(t)
            if tid is not None:
                out.append(int(tid))
    return out


# ====================================================================== helpers


def _added_contents(tok: tokenizers.Tokenizer) -> set[str]:
    return {t.content for t in tok.get_added_tokens_decoder().values()}


def _dedupe(ids: Iterable[int]) -> list[int]:
    seen: dict[int, None] = {}
    for i in ids:
        seen.setdefault(int(i), None)
    return list(seen)


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
