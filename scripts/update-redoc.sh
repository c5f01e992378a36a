#!/bin/sh
# Refreshes the Redoc bundle that GET /docs/api serves (internal/api/apidocs): fetches the npm
# package redoc at one exact version with `npm pack` and copies its standalone bundle and licence
# texts into the package, where go:embed picks them up. Change the version in this file and in
# internal/api/apidocs/README.md together, run the script, then run the browser test:
#
#   sh scripts/update-redoc.sh
#   go test -count=1 -run Docs ./internal/api/...
#
# One change is made to the bundle: the menu's "API docs by Redocly" footer shows a logo that
# Redoc loads from its CDN; its URL becomes an empty data: URL, which fails to load as an image,
# and Redoc then leaves the logo out. The page must not reach any other host.
set -eu
version=2.5.4
logo='https://cdn.redoc.ly/redoc/logo-mini.svg'

dir=$(cd "$(dirname "$0")/.." && pwd)/internal/api/apidocs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "redoc@$version" >/dev/null)
tar -xzf "$tmp/redoc-$version.tgz" -C "$tmp"
pkg=$tmp/package
got=$(sed -n 's/^ *"version": "\(.*\)",$/\1/p' "$pkg/package.json" | head -n 1)
if [ "$got" != "$version" ]; then
  echo "update-redoc: npm gave redoc $got, want $version" >&2
  exit 1
fi

n=$(grep -o "$logo" "$pkg/bundles/redoc.standalone.js" | wc -l)
if [ "$n" -ne 1 ]; then
  echo "update-redoc: the bundle names $logo $n times, want once: check the patch by hand" >&2
  exit 1
fi
sed "s#\"$logo\"#\"data:,\"#" "$pkg/bundles/redoc.standalone.js" >"$dir/redoc.standalone.js"
cp "$pkg/LICENSE" "$dir/LICENSE"
cp "$pkg/bundles/redoc.standalone.js.LICENSE.txt" "$dir/redoc.standalone.js.LICENSE.txt"
echo "update-redoc: redoc $version in $dir"
