"""A byte-level BPE tokenizer rebuilt from a GGUF file's metadata, cached next to the file.

It reproduces llama.cpp's pre-tokenization for the supported `tokenizer.ggml.pre` types:

* ``smollm``: every digit is split off on its own (``\\p{N}``) before the GPT-2 regex. This is the split that
  transformers' own GGUF conversion leaves out, so whitespace before digits tokenizes differently there.
* ``qwen2``: Qwen2's regex split, then byte-level mapping without a regex. Qwen's reference tokenizer also
  applies NFC normalization, which we do as well (llama.cpp does not; it only matters for non-NFC input).

Functions take the Tokenizer class as `cls` so this module need not import jspec.io.tokenizer, which imports it.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import TYPE_CHECKING, Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

from jspec.errors import UserError
from jspec.io.atomic_text import atomic_write_text
from jspec.io.chat_template import chat_end_ids

if TYPE_CHECKING:
    from jspec.io.tokenizer import Tokenizer

# GGUF token types (llama.cpp's llama_token_type).
_TT_NORMAL, _TT_UNKNOWN, _TT_CONTROL, _TT_USER_DEFINED, _TT_UNUSED, _TT_BYTE = 1, 2, 3, 4, 5, 6

_QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

SUPPORTED_GGUF_PRE = ("smollm", "qwen2")

# Bump when the GGUF -> tokenizer conversion changes, so stale caches are rebuilt.
_CACHE_VERSION = 1


def load(cls: type[Tokenizer], path: pathlib.Path, *, use_cache: bool) -> Tokenizer:
    """The tokenizer of the GGUF at `path`, from the cache beside it when that is fresh; else built and cached."""
    try:
        st = path.stat()
    except OSError as exc:
        raise UserError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from exc
    key = {"version": _CACHE_VERSION, "gguf_size": st.st_size, "gguf_mtime_ns": st.st_mtime_ns}
    tok_path, meta_path = _cache_paths(path)
    if use_cache:
        cached = _load_cache(cls, tok_path, meta_path, key)
        if cached is not None:
            return cached
    tok = _build_from_gguf(cls, path)
    if use_cache:
        _write_cache(tok, tok_path, meta_path, key)
    return tok


# ====================================================================== GGUF conversion


def _build_from_gguf(cls: type[Tokenizer], path: pathlib.Path) -> Tokenizer:
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

    eos: list[int] = [int(eos_id)] if eos_id is not None else []
    eos.extend(chat_end_ids(chat_template, tok))
    if pre == "qwen2":
        eot = tok.token_to_id("<|endoftext|>")
        if eot is not None:
            eos.append(eot)
    return cls(
        tok,
        eos_token_ids=list(dict.fromkeys(eos)),
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


def _load_cache(
    cls: type[Tokenizer], tok_path: pathlib.Path, meta_path: pathlib.Path, key: dict[str, Any]
) -> Tokenizer | None:
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("key") != key:
            return None
        raw = tok_path.read_bytes()
        if hashlib.sha256(raw).hexdigest() != meta.get("tokenizer_sha256"):
            return None
        tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        return cls(
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
        atomic_write_text(tok_path, raw)
        atomic_write_text(meta_path, json.dumps(meta, indent=1, ensure_ascii=False))
    except OSError:
        pass  # read-only location: work without a cache
