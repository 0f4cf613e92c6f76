# Sourced by examples/demo.sh and tests/run.sh: a venv with the project installed, made once and reused.
# Usage: . .ci/bootstrap.sh [EXTRAS]   (EXTRAS like "dev" or "dev,spark")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRAS="${1:-}"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
STAMP=".venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)-${EXTRAS//,/_}"
if [ ! -f "$STAMP" ]; then
  echo "setting up .venv (${EXTRAS:-runtime} dependencies)..." >&2
  if ! { .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip &&
         .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${EXTRAS:+[$EXTRAS]}"; } \
       > .venv/install.log 2>&1; then
    cat .venv/install.log >&2
    echo "installing dependencies failed; see above" >&2
    exit 1
  fi
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
