#!/bin/sh
# Builds the static baton binary the container image ships, and CI builds it the same way:
# no cgo (the SQLite driver, modernc.org/sqlite, is pure Go), paths trimmed, symbols stripped.
# The version comes from BATON_VERSION when set; the commit and Go version are stamped by the
# go command from the checkout.
#
#   sh scripts/build-static.sh OUT
set -eu
out=${1:?usage: build-static.sh OUT}
ldflags="-s -w"
if [ -n "${BATON_VERSION:-}" ]; then
  ldflags="$ldflags -X main.version=$BATON_VERSION"
fi
# Outside a readable git checkout (a source archive, a context without .git) there is no commit
# to stamp; the go command would fail rather than leave it out.
buildvcs=auto
if ! git rev-parse --git-dir >/dev/null 2>&1; then buildvcs=false; fi
CGO_ENABLED=0 go build -trimpath -buildvcs=$buildvcs -ldflags "$ldflags" -o "$out" ./cmd/baton
