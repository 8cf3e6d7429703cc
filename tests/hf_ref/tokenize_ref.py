"""Reference tokenization with HF transformers (run by tests/test_tokenizer.py in the .venv-hf interpreter).

Reads a JSON request on stdin:
    {"dir": str, "gguf_file": str | null, "texts": [str], "chats": [[message, ...]]}
and prints one JSON object on stdout:
    {"ids": [[int]], "chat_text": [str], "chat_ids": [[int]], "tokenizer_class": str}
`ids` encode each text without special tokens added; `chat_text` is apply_chat_template(tokenize=False,
add_generation_prompt=True) and `chat_ids` that text encoded without added special tokens (what
apply_chat_template(tokenize=True) does). With `gguf_file`, transformers converts the GGUF's tokenizer itself.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    from transformers import AutoTokenizer

    req = json.load(sys.stdin)
    kwargs = {"gguf_file": req["gguf_file"]} if req.get("gguf_file") else {}
    tok = AutoTokenizer.from_pretrained(req["dir"], **kwargs)
    out = {
        "tokenizer_class": type(tok).__name__,
        "ids": [tok.encode(t, add_special_tokens=False) for t in req.get("texts", [])],
        "chat_text": [],
        "chat_ids": [],
    }
    for chat in req.get("chats", []):
        text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        out["chat_text"].append(text)
        out["chat_ids"].append(tok.encode(text, add_special_tokens=False))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
