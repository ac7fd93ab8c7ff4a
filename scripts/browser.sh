#!/usr/bin/env bash
# Headless Chromium for the browser tests (tests/browser): Debian's chromium and chromium-driver
# (apt, when missing and we can install packages) and selenium in .venv (PyPI). Run by
# scripts/test.sh. With CI=true a browser that cannot be installed is an error; otherwise the
# browser tests skip and say why.
set -uo pipefail
cd "$(dirname "$0")/.."

have_browser() {
  { command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; } &&
    { command -v chromedriver >/dev/null 2>&1 || [ -x /usr/bin/chromedriver ]; }
}

if ! have_browser && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
  fi
  if [ "$(id -u)" = "0" ] || [ -n "$SUDO" ]; then
    echo "installing chromium and chromium-driver (apt)"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq || true
    $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null || true
  fi
fi

if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import selenium" 2>/dev/null; then
  .venv/bin/python -m pip install -q "selenium>=4.20" || true
fi

if ! have_browser || ! .venv/bin/python -c "import selenium" 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "ERROR: headless Chromium (chromium, chromium-driver) and selenium are required in CI" >&2
    exit 1
  fi
  echo "WARNING: no chromium/chromium-driver/selenium: the browser tests will be skipped" >&2
fi
exit 0
