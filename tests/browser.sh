#!/usr/bin/env bash
# Chromium for tests/integration/test_page_in_browser.py, from the distribution's packages (a browser a test
# framework downloads for itself cannot be fetched here): installed once, with apt, as root or through sudo.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  as_root=(sudo -n)
fi
echo "installing Chromium (Debian's package chromium) for the page's browser test..." >&2
export DEBIAN_FRONTEND=noninteractive
if ! "${as_root[@]}" apt-get install -y -q chromium >/tmp/engine-chromium.log 2>&1; then
  "${as_root[@]}" apt-get update -q >>/tmp/engine-chromium.log 2>&1
  "${as_root[@]}" apt-get install -y -q chromium >>/tmp/engine-chromium.log 2>&1 || {
    cat /tmp/engine-chromium.log >&2
    echo "installing Chromium failed; see above" >&2
    exit 1
  }
fi
