#!/usr/bin/env bash
# Set up (first run) and run the test suite: jspec venv, HF reference venv, SmolLM2 asset, then pytest.
source "$(dirname "$0")/_venv.sh"
ensure_venv
ensure_hf_venv
.venv/bin/jspec assets install --models smollm2-135m
exec .venv/bin/python -m pytest -n 2 --durations=15 "$@"
