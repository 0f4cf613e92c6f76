#!/usr/bin/env bash
# The whole test suite from a fresh machine: venv and dependencies, Kafka jars from Maven Central,
# linters and the docs site, then every test (unit, integration on a real Kafka started by the fixtures).
set -euo pipefail
. "$(dirname "$0")/../.ci/bootstrap.sh" dev,spark
python -m tests.kafka resolve >/dev/null
python -m tests.schema_registry resolve >/dev/null
bash tests/browser.sh  # Chromium from the distribution's packages, for the page's test in a real browser
echo "== ruff";          ruff check .
echo "== mypy";          mypy && mypy tests/typing  # (the second: engine's types as apps see them)
echo "== import-linter"; lint-imports
# The wheel's check (a build and a venv: mostly waiting on pip) runs beside the rest; its verdict is
# awaited after the tests.
wheel_log="$(mktemp)"
bash tests/wheel/check.sh python >"$wheel_log" 2>&1 &
wheel_check=$!
# (not --quiet: it hides the warnings --strict fails on, and the build passes whatever they say)
echo "== mkdocs";        NO_MKDOCS_2_WARNING=1 mkdocs build --strict   # into build/site (git-ignored)
# Three test processes, each with its own brokers: most tests wait on brokers and workers, not on the CPU.
# A file stays in one process.
echo "== pytest";        python -m pytest -p no:cacheprovider -n 3 --dist loadfile -m "not storm" "$@"
# Then the restart storms, alone: beside the event-time differential one ran past its bounds and once gave
# outputs twice; side by side, the at-least-once app of the 3-node storm once stopped fetching two partitions
# for good (docs/rebalances-and-faults.md, "The broker restarting"). (Exit code 5, no test selected, when
# the arguments select none of them.)
echo "== pytest: the restart storms, alone"
python -m pytest -p no:cacheprovider -m storm "$@" || { code=$?; [ "$code" -eq 5 ] || exit "$code"; }
echo "== the wheel, installed outside the checkout"
wait "$wheel_check" || { cat "$wheel_log"; exit 1; }
rm -f "$wheel_log"
