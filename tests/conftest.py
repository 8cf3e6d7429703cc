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
