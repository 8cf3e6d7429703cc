#!/usr/bin/env bash
# Set up (first run) and run the test suite: jspec venv, HF reference venv, SmolLM2 + Qwen-0.5B assets, then pytest.
source "$(dirname "$0")/_venv.sh"
ensure_venv
ensure_hf_venv
.venv/bin/jspec assets install --models smollm2-135m,qwen2.5-coder-0.5b --datasets all
exec .venv/bin/python -m pytest -n 2 --durations=15 "$@"
