"""HF transformers oracle, run by the tests in the reference venv (.venv-hf, Python 3.11 + torch CPU).

Reads a JSON list of requests on stdin, writes the JSON list of answers on stdout (one process: torch imports once).
Requests:
  {"op": "make_tiny", "family": ..., "dir": ..., "seed": ...}  save a tiny random HF model (+ config) to dir
  {"op": "logits", "model": dir_or_gguf, "ids": [[...]], "out": f.npz}  full-sequence float32 logits
  {"op": "generate", "model": dir_or_gguf, "ids": [[...]], "max_new_tokens": n}  greedy continuation ids
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

TINY = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False)


def make_tiny(req):
    family = req["family"]
    torch.manual_seed(req.get("seed", 0))
    kw = dict(TINY, **req.get("overrides", {}))
    if family == "llama":
        cfg = transformers.LlamaConfig(**kw)
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(**kw)
    elif family == "qwen3":
        cfg = transformers.Qwen3Config(head_dim=kw["hidden_size"] // kw["num_attention_heads"], **kw)
    else:
        raise ValueError(family)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():  # default init leaves norms at 1 and biases at 0: randomise them so they are tested
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(req["dir"], safe_serialization=True)
    return {"ok": True}


def load(path):
    path = pathlib.Path(path)
    if path.suffix == ".gguf":
        return transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                  torch_dtype=torch.float32)
    return transformers.AutoModelForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32)


def logits(req):
    model = load(req["model"]).eval()
    out = []
    with torch.no_grad():
        for ids in req["ids"]:
            out.append(model(torch.tensor([ids])).logits[0].numpy())
    np.savez(req["out"], *out)
    return {"ok": True}


def generate(req):
    model = load(req["model"]).eval()
    res = []
    with torch.no_grad():
        for ids in req["ids"]:
            g = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                               max_new_tokens=req["max_new_tokens"], do_sample=False,
                               eos_token_id=req.get("eos_token_id"), pad_token_id=0)
            res.append(g[0, len(ids):].tolist())
    return {"tokens": res}


if __name__ == "__main__":
    ops = {"make_tiny": make_tiny, "logits": logits, "generate": generate}
    sys.stdout.write(json.dumps([ops[r["op"]](r) for r in json.loads(sys.stdin.read())]))
