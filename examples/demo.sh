#!/usr/bin/env bash
# The zero-setup demo: installs what it needs into .venv, then runs examples/demo.py on memory://.
set -euo pipefail
. "$(dirname "$0")/../.ci/bootstrap.sh"
exec .venv/bin/python -m examples.demo
