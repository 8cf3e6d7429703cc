#!/usr/bin/env bash
# Set up (first run) and generate: speculative/vanilla generation with a real model (default smollm2-135m).
# Any `jspec generate` option can be passed, e.g. scripts/generate.sh --prompt "Hello" --max-new-tokens 64
source "$(dirname "$0")/_venv.sh"
ensure_venv
exec .venv/bin/jspec generate "$@"
