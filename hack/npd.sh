#!/usr/bin/env bash
# Builds node-problem-detector (NPD) for capn's end-to-end health test, and
# prints the binary's path. The binary is cached outside the repository,
# keyed by version, and reused when present:
#
#   ${CAPN_NPD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/npd}/<version>/node-problem-detector
#
# `go install k8s.io/node-problem-detector/cmd/nodeproblemdetector@<version>`
# is refused by this machine's module proxy (its version list answers 403),
# so the module is fetched with `go mod download` (an explicit version
# needs no list), copied out of the read-only module cache, and built
# statically (CGO_ENABLED=0; journald support would need cgo and is left
# out — capn's test watches a plain log file).
#
# Usage: hack/npd.sh [--print-path]
#   --print-path  print where the binary is (or would be) and exit 0.
set -euo pipefail

version=${NPD_VERSION:-v1.36.0}
module=k8s.io/node-problem-detector
cache=${CAPN_NPD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/npd}
out=$cache/$version/node-problem-detector

if [[ ${1:-} == --print-path ]]; then
  echo "$out"
  exit 0
fi
if [[ -x $out ]]; then
  echo "$out"
  exit 0
fi

go=${GO:-go}
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
start=$(date +%s)

# Outside any module, so that the repository's go.mod is never touched.
dir=$(cd "$work" && GOFLAGS=-mod=mod GO111MODULE=on "$go" mod download -json "$module@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [[ -z $dir || ! -d $dir ]]; then
  echo "npd: go mod download $module@$version gave no module directory" >&2
  exit 1
fi
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"

mkdir -p "$(dirname "$out")"
(cd "$work/src" &&
  CGO_ENABLED=0 GOFLAGS=-mod=mod "$go" build -trimpath \
    -ldflags "-s -w -X $module/pkg/version.version=$version" \
    -o "$out.tmp" ./cmd/nodeproblemdetector)
mv -f "$out.tmp" "$out"
echo "npd: built $module $version in $(( $(date +%s) - start ))s: $out" >&2
echo "$out"
