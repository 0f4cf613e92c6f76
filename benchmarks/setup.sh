#!/usr/bin/env bash
# A separate venv for benchmarks: engine plus the peers it is compared with (faust-streaming, quixstreams).
# The peers are never dependencies of engine itself.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv-bench/bin/python ]; then
  python3 -m venv .venv-bench
fi
if [ ! -f .venv-bench/.installed ]; then
  .venv-bench/bin/python -m pip install -q --disable-pip-version-check --upgrade pip > /dev/null
  .venv-bench/bin/python -m pip install -q --disable-pip-version-check -e . faust-streaming quixstreams \
    > .venv-bench/install.log 2>&1 || { cat .venv-bench/install.log; exit 1; }
  touch .venv-bench/.installed
fi
