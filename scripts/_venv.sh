# Sourced by scripts/*.sh: create/update the Python 3.12 venv (.venv) with jspec and its dev extras.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

find_python() {  # $1 = version, e.g. 3.12
  local v="$1" cand
  for cand in "python$v" "$HOME/.pyenv/versions/$v"*/bin/python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$v'.split('.')))" 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  echo "jspec: error: Python $v not found (install it, e.g. with pyenv)" >&2; return 1
}

ensure_venv() {  # .venv with jspec[dev]; reinstalls only when pyproject.toml changed
  local stamp=".venv/.jspec-installed"
  if [ ! -x .venv/bin/python ]; then
    "$(find_python 3.12)" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "jspec: installing jspec and its dependencies into .venv" >&2
    .venv/bin/python -m pip install -q -e ".[dev]"
    touch "$stamp"
  fi
}

ensure_hf_venv() {  # .venv-hf: transformers + torch CPU (Python 3.11), the oracle of the parity tests
  local stamp=".venv-hf/.jspec-installed"
  if [ ! -x .venv-hf/bin/python ]; then
    "$(find_python 3.11)" -m venv .venv-hf
    .venv-hf/bin/python -m pip install -q --upgrade pip
  fi
  if [ ! -f "$stamp" ] || [ tests/hf_ref/requirements.txt -nt "$stamp" ]; then
    echo "jspec: installing the HF reference venv (.venv-hf)" >&2
    .venv-hf/bin/python -m pip install -q -r tests/hf_ref/requirements.txt
    touch "$stamp"
  fi
}
