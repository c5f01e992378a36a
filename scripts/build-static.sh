#!/bin/sh
# Builds the static baton binary the container image ships, and CI builds it the same way: with
# cgo, for the Query Service's DuckDB, and linked statically (glibc and libstdc++ included), so
# that it runs on an image with no C library; paths trimmed, symbols stripped. It needs a C and
# C++ toolchain with static libraries (Debian: gcc, g++, libc6-dev; the golang images have
# them). CGO_ENABLED=0 go build ./cmd/baton builds a binary without the Query Service instead,
# which answers its endpoints 501.
#
# The version comes from BATON_VERSION when set; the commit and Go version are stamped by the
# go command from the checkout.
#
#   sh scripts/build-static.sh OUT
set -eu
out=${1:?usage: build-static.sh OUT}
# netgo and osusergo: Go's own DNS resolver and user lookup, which a static binary needs (glibc's
# load shared libraries at run time). DuckDB's own calls to them (extension loading, remote
# files, the home directory) are never made: extensions, remote files and file access beyond a
# query's own are off (internal/query/engine), so the linker's warnings about them are expected.
ldflags="-s -w -linkmode external -extldflags -static"
if [ -n "${BATON_VERSION:-}" ]; then
  ldflags="$ldflags -X main.version=$BATON_VERSION"
fi
# Outside a readable git checkout (a source archive, a context without .git) there is no commit
# to stamp; the go command would fail rather than leave it out.
buildvcs=auto
if ! git rev-parse --git-dir >/dev/null 2>&1; then buildvcs=false; fi
CGO_ENABLED=1 go build -trimpath -buildvcs=$buildvcs -tags netgo,osusergo -ldflags "$ldflags" -o "$out" ./cmd/baton 2>"$out.log" ||
  { cat "$out.log" >&2; rm -f "$out.log"; exit 1; }
# The linker's warnings about glibc functions DuckDB never calls here are kept out of the way.
grep -v -e "requires at runtime the shared libraries" -e "in function \`" -e "^# " "$out.log" >&2 || true
rm -f "$out.log"
