#!/usr/bin/env bash
# engine as a library, outside the checkout: build the wheel, install it into a clean venv in a temporary
# directory, and from there run the demo on the in-memory broker, the CLI on an installed example, and a
# driver test with the wheel's pytest plugin (installed_driver.py). tests/run.sh runs it first.
# Usage: bash tests/wheel/check.sh [PYTHON]   (PYTHON builds the wheel; default python3)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${1:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# Built from a copy of the checkout's files (tracked, and new ones not ignored): a build in the checkout
# would reuse its build/ folder, where a module deleted since still lies.
mkdir "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' file; do [ ! -e "$file" ] || cp --parents "$file" "$WORK/src"; done)
"$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WORK/dist" "$WORK/src"
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check "$WORK"/dist/engine_streams-*.whl pytest
cd "$WORK"
cp "$ROOT/tests/wheel/installed_driver.py" test_installed_driver.py
"$WORK/venv/bin/python" -m engine_examples.demo > demo.out
grep -q "wordcount" demo.out || { cat demo.out; echo "the installed demo printed no word counts" >&2; exit 1; }
"$WORK/venv/bin/engine" agents -A engine_examples.wordcount:app
"$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider test_installed_driver.py
# The app's page ships in the wheel (engine.web.server serves it from the installed package).
"$WORK/venv/bin/python" - <<'PY'
from importlib.resources import files
page = files("engine.web") / "page"
missing = [name for name in ("index.html", "page.js", "page.css") if not (page / name).is_file()]
assert not missing, f"the wheel lacks the page's files: {missing}"
PY
"$WORK/venv/bin/engine" topology -A engine_examples.wordcount:app --format mermaid | grep -q "flowchart LR"
