"""Shared fixtures: float32 on CPU, the HF transformers oracle (a Python 3.11 venv with torch CPU), real assets."""

import gc
import json
import atexit
import os
import pathlib
import shutil
import subprocess
import tempfile

import jax
import pytest

jax.config.update("jax_default_matmul_precision", "highest")


def _share_compilation_cache() -> None:
    """One persistent compilation cache for the whole run: the pytest process creates it, its xdist workers and the CLI
    subprocesses inherit it through the environment. The real-model tests compile the same 30-layer programs in many
    modules, workers and subprocesses (and _release_compiled_programs drops the in-memory ones after each module);
    on the 2-core CI machine each compilation costs 10-30 s."""
    if "JSPEC_TEST_COMPILATION_CACHE" not in os.environ:  # the first process of the run (pytest itself)
        path = tempfile.mkdtemp(prefix="jspec-test-xla-cache-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        os.environ["JSPEC_TEST_COMPILATION_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    jax.config.update("jax_compilation_cache_dir", os.environ["JSPEC_TEST_COMPILATION_CACHE"])


_share_compilation_cache()

REPO = pathlib.Path(__file__).resolve().parents[1]
HF_PYTHON = pathlib.Path(os.environ.get("JSPEC_HF_PYTHON", REPO / ".venv-hf" / "bin" / "python"))


def _missing(what: str):
    # In CI the reference venv and assets are installed by scripts/test.sh: missing there is a failure, not a skip.
    if os.environ.get("CI"):
        pytest.fail(f"{what} missing in CI")
    pytest.skip(f"{what} not installed (run scripts/test.sh)")


@pytest.fixture(scope="session")
def hf_oracle():
    """Callable: list of requests -> list of answers, computed by tests/hf_ref/hf_oracle.py under transformers."""
    if not HF_PYTHON.exists():
        _missing(f"HF reference interpreter {HF_PYTHON}")

    def call(requests: list[dict]) -> list[dict]:
        proc = subprocess.run([str(HF_PYTHON), str(REPO / "tests" / "hf_ref" / "hf_oracle.py")],
                              input=json.dumps(requests), capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"HF oracle failed:\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout)

    return call


def _installed_gguf(name: str) -> pathlib.Path:
    from jspec import assets

    try:
        return assets.model_gguf(name, install_missing=False, progress=False)
    except Exception as e:  # noqa: BLE001
        _missing(f"{name} asset ({e})")


@pytest.fixture(scope="session")
def smollm2_gguf() -> pathlib.Path:
    return _installed_gguf("smollm2-135m")


@pytest.fixture(scope="session")
def qwen05_gguf() -> pathlib.Path:
    return _installed_gguf("qwen2.5-coder-0.5b")


@pytest.fixture(scope="session")
def smollm2_4_layers(smollm2_gguf, tmp_path_factory) -> pathlib.Path:
    """SmolLM2's first 4 decoder layers, with its embedding, final norm and tokenizer (chat template included), as an
    HF checkpoint directory: a real-vocabulary chat target for tools whose checks do not depend on the model's
    quality, compiled and run several times faster than the 30 layers."""
    import safetensors.numpy

    from jspec.io.gguf_loader import config_from_gguf, load_gguf_tensors, open_gguf
    from jspec.io.tokenizer import Tokenizer

    layers = 4
    reader = open_gguf(smollm2_gguf)
    cfg = config_from_gguf(reader, str(smollm2_gguf))
    assert cfg.family == "llama" and cfg.rope.scaling == "none" and cfg.tie_embeddings  # what config.json below keeps
    tensors = {name: w for name, w in load_gguf_tensors(reader, cfg, progress=False).items()
               if not name.startswith("model.layers.") or int(name.split(".")[2]) < layers}
    path = tmp_path_factory.mktemp("smollm2_4_layers")
    hf = {"model_type": "llama", "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
          "intermediate_size": cfg.intermediate_size, "num_hidden_layers": layers,
          "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
          "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope.theta, "max_position_embeddings": cfg.max_position,
          "tie_word_embeddings": True, "bos_token_id": cfg.bos_token_id, "eos_token_id": list(cfg.eos_token_ids)}
    (path / "config.json").write_text(json.dumps(hf))
    safetensors.numpy.save_file(tensors, str(path / "model.safetensors"))
    Tokenizer.from_gguf(smollm2_gguf).save_hf(path)
    return path


@pytest.fixture(scope="session")
def smollm2_vanilla(smollm2_gguf):
    """SmolLM2 in float32, 5 chat prompts (one repetitive, for retrieval), the decode settings and the 64 vanilla
    tokens of each: the reference of the block-drafter losslessness tests."""
    from jspec.decode import generate
    from jspec.models.loading import load_model

    m = load_model(str(smollm2_gguf), dtype="float32", progress=False)
    texts = ["Write a Python function that checks whether a number is prime.", "Write a haiku about the sea.",
             "Repeat this sentence twice: the quick brown fox jumps over the lazy dog.", "What is 17 times 23?",
             "Explain recursion in one sentence."]
    ids = [m.tokenizer.encode_chat([{"role": "user", "content": t}]) for t in texts]
    kw = dict(max_new_tokens=64, eos_ids=m.eos_token_ids, max_cache_len=256)
    return m, ids, kw, generate(m.graphdef, m.params, ids, **kw).tokens


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled executables after each module: a long-lived xdist worker otherwise accumulates thousands
    of XLA:CPU programs (and their code mappings), and twice aborted deep into a CI run."""
    yield
    jax.clear_caches()
    gc.collect()
