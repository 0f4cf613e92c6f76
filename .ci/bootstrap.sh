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
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
