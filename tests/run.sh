#!/usr/bin/env bash
# The whole test suite from a fresh machine: venv and dependencies, Kafka jars from Maven Central,
# linters, then every test (unit, integration on a real Kafka started by the fixtures).
set -euo pipefail
. "$(dirname "$0")/../.ci/bootstrap.sh" dev,spark
python -m tests.kafka resolve >/dev/null
echo "== ruff";          ruff check .
echo "== mypy";          mypy
echo "== import-linter"; lint-imports
echo "== pytest";        exec python -m pytest -p no:cacheprovider "$@"
