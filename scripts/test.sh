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
.venv/bin/python -m pip install -q -e '.[test,ray]'  # ray: the --ray tests start a two-node cluster on loopback
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the HTML report browser test will be skipped" >&2
fi
# the layers of docs/architecture.md (import-linter, .importlinter): no import from a lower layer to a higher
# one, no import cycles, lazy imports included
.venv/bin/lint-imports --no-cache --no-logo
# lint and format (ruff; settings in pyproject.toml [tool.ruff], 120 columns): a file the formatter would change, or
# a lint error, fails the run; `ruff format . && ruff check --fix .` mends most of it
.venv/bin/ruff format --check --quiet .
.venv/bin/ruff check --quiet .
# a real vLLM (CPU build) for tests/vllm, in a cached venv (scripts/vllm.sh); under CI=true a failed
# install fails the run, elsewhere those tests skip. An executable KNEECAP_VLLM_PYTHON already set is kept.
if [ -z "${KNEECAP_VLLM_PYTHON:-}" ] || [ ! -x "${KNEECAP_VLLM_PYTHON}" ]; then
  if KNEECAP_VLLM_PYTHON="$(bash scripts/vllm.sh)"; then
    export KNEECAP_VLLM_PYTHON
  elif [ "${CI:-}" = "true" ]; then
    echo "error: scripts/vllm.sh failed, and CI must run the vLLM tests" >&2
    exit 1
  else
    unset KNEECAP_VLLM_PYTHON
    echo "warning: scripts/vllm.sh failed; the vLLM tests will be skipped" >&2
  fi
fi
# the client's read paths on the lowest and the highest aiohttp of pyproject.toml's range, each in a cached
# venv (scripts/aiohttp_matrix.sh; ~90 s on a busy 2-core box once the venvs exist): a failure on either bound fails the run
bash scripts/aiohttp_matrix.sh
exec .venv/bin/python -m pytest -q "$@"
