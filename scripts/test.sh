#!/usr/bin/env bash
# The test command (README, step 2; .ci/run calls exactly this).
# Makes .venv if missing, installs kneecap with its test extras, installs the system
# packages the browser test needs (Debian chromium, when root and missing), runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the HTML report browser test will be skipped" >&2
fi
# the layers of docs/architecture.md (import-linter, .importlinter): no import from a lower layer to a higher
# one, no import cycles, lazy imports included
.venv/bin/lint-imports --no-cache --no-logo
# the layers of docs/architecture.md (import-linter, .importlinter): no import from a lower layer to a higher
# one, no import cycles, lazy imports included
.venv/bin/lint-imports --no-cache --no-logo
exec .venv/bin/python -m pytest -q "$@"
