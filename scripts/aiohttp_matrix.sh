#!/usr/bin/env bash
# The client's read paths on both ends of the aiohttp range in pyproject.toml: the lowest version it allows
# and the newest PyPI served when the range was last raised. The body tap (src/kneecap/client/body_tap.py)
# relies on aiohttp internals, so this runs the tests that read streams through aiohttp on each bound.
# One cached venv per bound: ${KNEECAP_CACHE:-$HOME/.cache/kneecap}/aiohttp-<version>, made when missing
# (pip install -e . aiohttp==<version> pytest hypothesis: a few minutes) and brought up to date in place
# when pyproject.toml changed (its stamp file differs); a venv another checkout installed is pointed at this one. Exit status: non-zero when the tests fail on either bound; a failed install fails
# the run under CI=true and is a warning elsewhere (those bounds are then not tested).
# Usage: bash scripts/aiohttp_matrix.sh [pytest args...]   (base python: ${KNEECAP_AIOHTTP_BASE_PYTHON:-python3})
set -euo pipefail
cd "$(dirname "$0")/.."
LOW="3.10.0"  # must equal the lower bound of pyproject.toml's aiohttp line (checked below)
HIGH="3.14.5" # newest on PyPI (`pip index versions aiohttp`), below pyproject.toml's upper bound
# the tests that send requests through aiohttp and read the answers by each path (tests/client has more,
# which parse bytes without aiohttp); on a 2-core box these take about half a minute per bound
TESTS=(tests/client/test_driver.py tests/client/test_driver_read_path.py
       tests/client/test_driver_streaming_records.py tests/client/test_keepalive_probe.py)
CACHE="${KNEECAP_CACHE:-$HOME/.cache/kneecap}"

line="$(grep -E '^ *"aiohttp[<>=]' pyproject.toml || true)"
if [[ "$line" != *"aiohttp>=$LOW,"* ]]; then
  echo "aiohttp matrix: pyproject.toml's aiohttp line ($line) does not start at $LOW; update LOW in $0" >&2
  exit 1
fi
upper="$(sed -E 's/.*,<([0-9.]+).*/\1/' <<<"$line")"
if [ "$(printf '%s\n%s\n' "$HIGH" "$upper" | sort -V | tail -1)" != "$upper" ] || [ "$HIGH" = "$upper" ]; then
  echo "aiohttp matrix: HIGH $HIGH is not below pyproject.toml's upper bound <$upper" >&2
  exit 1
fi
recipe="$(sha256sum pyproject.toml | cut -c1-16)"
status=0
for version in "$LOW" "$HIGH"; do
  venv="$CACHE/aiohttp-$version"
  py="$venv/bin/python"
  stamp="$venv/.kneecap-recipe"
  if [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "aiohttp==$version; $recipe" ]; then
    echo "aiohttp matrix: cached venv $venv" >&2
  else
    echo "aiohttp matrix: installing kneecap with aiohttp==$version into $venv" >&2
    started=$(date +%s)
    mkdir -p "$CACHE"
    if [ ! -x "$py" ]; then
      rm -rf "$venv"
      "${KNEECAP_AIOHTTP_BASE_PYTHON:-python3}" -m venv "$venv" && "$py" -m pip install -q --upgrade pip >&2 || true
    fi
    if ! "$py" -m pip install -q -e . "aiohttp==$version" pytest hypothesis >&2; then
      rm -rf "$venv"
      if [ "${CI:-}" = "true" ]; then
        echo "error: could not install aiohttp==$version, and CI must test both bounds" >&2
        exit 1
      fi
      echo "warning: could not install aiohttp==$version; that bound is not tested" >&2
      continue
    fi
    printf '%s' "aiohttp==$version; $recipe" > "$stamp"
    echo "aiohttp matrix: installed in $(( $(date +%s) - started )) s" >&2
  fi
  want="$version $(realpath "$PWD/src/kneecap")"
  probe='import aiohttp, kneecap, os; print(aiohttp.__version__, os.path.realpath(os.path.dirname(kneecap.__file__)))'
  got="$("$py" -c "$probe" 2>/dev/null || true)"
  if [ "$got" != "$want" ]; then
    # a venv cached by another checkout (CI clones to a new path each run): point its editable kneecap here
    echo "aiohttp matrix: $venv has '$got'; installing this checkout's kneecap into it" >&2
    "$py" -m pip install -q --no-deps -e . >&2
    got="$("$py" -c "$probe" 2>/dev/null || true)"
  fi
  if [ "$got" != "$want" ]; then
    echo "error: $venv has '$got', not aiohttp $version with this checkout's kneecap; remove it and run again" >&2
    exit 1
  fi
  started=$(date +%s)
  if "$py" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@"; then
    echo "aiohttp matrix: aiohttp $version passed in $(( $(date +%s) - started )) s" >&2
  else
    echo "error: the client tests failed on aiohttp $version" >&2
    status=1
  fi
done
exit $status
