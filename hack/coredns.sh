#!/usr/bin/env bash
# Builds CoreDNS (issue 26: the cluster DNS kubeadm installs on a real
# node) and prints the directory of its binary, cached outside the
# repository, keyed by the version, reused when present:
#
#   ${CAPN_COREDNS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/coredns}/<version>/bin/coredns
#
# The version is the one kubeadm of KUBE_VERSION names in its CoreDNS image
# tag (`kubeadm config images list`: registry.k8s.io/coredns/coredns:v1.14.6
# for v1.37.2); hack/nodeimages.sh checks that they agree. As in
# hack/nodestack.sh, the module github.com/coredns/coredns is fetched with
# `go mod download` and built from a small generated module in a temporary
# directory (CoreDNS's go.mod replaces nothing, so the build list is its
# own), static (CGO_ENABLED=0, as CoreDNS's Makefile builds it), with its
# default plugins (plugin.cfg, already generated into core/plugin), stamped
# as its Makefile stamps it (coremain.GitCommit: here the version).
#
# Usage: hack/coredns.sh [--print-path]
set -euo pipefail

version=${COREDNS_VERSION:-v1.14.6}
cache=${CAPN_COREDNS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/coredns}
dir=$cache/$version
bin=$dir/bin

case ${1:-} in
  --print-path) echo "$bin"; exit 0 ;;
  '') ;;
  *) echo "usage: hack/coredns.sh [--print-path]" >&2; exit 2 ;;
esac
if [[ -x $bin/coredns ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache"
if command -v flock >/dev/null; then
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    echo "coredns: another build holds $cache/.lock; waiting for it" >&2
    flock 9
  fi
  if [[ -x $bin/coredns ]]; then
    echo "$bin"
    exit 0
  fi
fi

go=${GO:-go}
tmp=$dir.tmp
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work" "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/bin"
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off GO111MODULE=on

start=$(date +%s)
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "coredns: building $version into $tmp with $("$go" env GOVERSION) (load average $load on $(nproc) cores)" >&2
m=github.com/coredns/coredns
printf 'module capn.local/corednsbuild\n\ngo 1.26.0\n\nrequire %s %s\n' "$m" "$version" >"$work/go.mod"
"$go" -C "$work" list -deps "$m" >/dev/null
resolved=$(($(date +%s) - start))
"$go" -C "$work" build -trimpath -ldflags "-s -w -X $m/coremain.GitCommit=$version" -o "$tmp/bin/coredns" "$m"
"$tmp/bin/coredns" -version >"$work/version"
grep -q "CoreDNS-${version#v}" "$work/version" || { echo "coredns: the binary says $(cat "$work/version"), not $version" >&2; exit 1; }
{
  echo "CoreDNS $version ($m), static, -trimpath -ldflags '-s -w', by hack/coredns.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) with $("$go" env GOVERSION)"
  echo "load average at start $load, at end $(cut -d' ' -f1-3 /proc/loadavg), on $(nproc) cores"
  echo "modules ${resolved}s, total $(($(date +%s) - start))s, $(du -k "$tmp/bin/coredns" | awk '{printf "%.1f MiB", $1/1024}')"
  cat "$work/version"
} >"$tmp/BUILD-INFO"
rm -rf "$dir"
mv "$tmp" "$dir"
echo "coredns: built in $(($(date +%s) - start))s: $bin" >&2
echo "$bin"
