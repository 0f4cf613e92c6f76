#!/usr/bin/env bash
# The whole test suite from a fresh machine: venv and dependencies, Kafka jars from Maven Central,
# linters and the docs site, then every test (unit, integration on a real Kafka started by the fixtures).
set -euo pipefail
. "$(dirname "$0")/../.ci/bootstrap.sh" dev,spark
python -m tests.kafka resolve >/dev/null
python -m tests.schema_registry resolve >/dev/null
echo "== ruff";          ruff check .
echo "== mypy";          mypy && mypy tests/typing  # (the second: engine's types as apps see them)
echo "== import-linter"; lint-imports
# (not --quiet: it hides the warnings --strict fails on, and the build passes whatever they say)
echo "== the wheel, installed outside the checkout"; bash tests/wheel/check.sh python
echo "== mkdocs";        NO_MKDOCS_2_WARNING=1 mkdocs build --strict   # into build/site (git-ignored)
# Two test processes, each with its own brokers: most tests wait on brokers and workers, not on the CPU
# (the whole suite took 12 minutes in one process and 8 in two, on 2 cores). A file stays in one process.
echo "== pytest";        python -m pytest -p no:cacheprovider -n 2 --dist loadfile -m "not storm" "$@"
# Then the restart storms, alone: beside the event-time differential in the other process one ran past its
# bounds and once gave outputs twice, where beside two busy processes 18 runs of 18 were exact. (Exit code 5,
# no test selected, when the arguments select none of them.)
echo "== pytest: the restart storms, alone"
python -m pytest -p no:cacheprovider -m storm "$@" || { code=$?; [ "$code" -eq 5 ] || exit "$code"; }
