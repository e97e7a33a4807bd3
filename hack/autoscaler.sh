#!/usr/bin/env bash
# Builds the upstream Kubernetes cluster-autoscaler with only its
# externalgrpc cloud provider compiled in (-tags externalgrpc), the program
# capn's autoscaler-provider serves (docs/autoscaling.md), and prints the
# binary's path. It is cached outside the repository, keyed by the commit
# of github.com/kubernetes/autoscaler it is built from (AUTOSCALER_COMMIT),
# and reused when present:
#
#   ${CAPN_AUTOSCALER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/autoscaler}/<commit>/bin/cluster-autoscaler
#
# The source. The autoscaler is not released as Go modules (its tags are
# cluster-autoscaler-1.x.y, not cluster-autoscaler/v1.x.y), so the module
# proxy can only serve it as a pseudo-version of a commit. This script asks
# for it the way hack/kube.sh asks for Kubernetes — `go mod download` of
# k8s.io/autoscaler/cluster-autoscaler@<commit> and of its nested module
# k8s.io/autoscaler/cluster-autoscaler/apis@<commit> (the module's go.mod
# replaces it with ./apis, which is not in the module zip). A proxy that
# refuses the commit (this development machine's and CI's answer 403 "This
# module version is not available") leaves the snapshot in the repository:
# third_party/cluster-autoscaler/cluster-autoscaler-<commit>.tar.gz, a
# pruned, unmodified `git archive` of the commit holding only what the
# build compiles (hack/autoscaler-snapshot.sh regenerates it), used only
# if its sha256 is AUTOSCALER_SNAPSHOT_SHA256 (the Makefile pins it).
# Without it (another commit), the git repository: the commit alone
# is fetched (`git fetch --depth 1`) from CAPN_AUTOSCALER_GIT (default
# https://github.com/kubernetes/autoscaler.git; a local clone or bare
# mirror works too) and its cluster-autoscaler/ directory exported with
# `git archive`. Either way the tree is the pinned commit's.
#
# Dependencies come from the module proxy, as the module's own go.mod and
# go.sum pin them (-mod=readonly: nothing is resolved anew, every download
# is checked against go.sum). The build is static (CGO_ENABLED=0),
# -trimpath, -s -w, and goes to <dir>.tmp, renamed to <dir> only once the
# binary built, so an interrupted build never leaves a cache that looks
# complete. Progress and timings go to stderr and <dir>/BUILD-INFO; the
# last line on stdout is the binary's path.
#
# Usage: hack/autoscaler.sh [--print-path]
#   --print-path  print where the binary is (or would be) and exit 0.
set -euo pipefail
name=autoscaler
. "$(dirname "$0")/lib.sh"

commit=${AUTOSCALER_COMMIT:?AUTOSCALER_COMMIT is the autoscaler commit to build (the Makefile pins it)}
if [[ ! $commit =~ ^[0-9a-f]{40}$ ]]; then
  log "AUTOSCALER_COMMIT must be a full 40-hex commit, not $commit"
  exit 2
fi
git_url=${CAPN_AUTOSCALER_GIT:-https://github.com/kubernetes/autoscaler.git}
root=$(cd "$(dirname "$0")/.." && pwd)
snapshot=$root/third_party/cluster-autoscaler/cluster-autoscaler-$commit.tar.gz
snapshot_sha256=${AUTOSCALER_SNAPSHOT_SHA256:-}
cache=${CAPN_AUTOSCALER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/autoscaler}
dir=$cache/$commit
out=$dir/bin/cluster-autoscaler
module=k8s.io/autoscaler/cluster-autoscaler

case ${1:-} in
  --print-path) echo "$out"; exit 0 ;;
  '') ;;
  *) echo "usage: hack/autoscaler.sh [--print-path]" >&2; exit 2 ;;
esac
if [[ -x $out ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
take_lock "$cache/.lock"
if [[ -x $out ]]; then
  echo "$out"
  exit 0
fi

go=${GO:-go}
workspace "$dir"

start=$(date +%s)

src=$work/src/cluster-autoscaler
mkdir -p "$work/src" "$work/mod"

# --- source: the module proxy ----------------------------------------------
# from_proxy copies the module and its apis module out of the (read-only)
# module cache; it fails, saying why, when the proxy does not serve them.
from_proxy() {
  local m json d
  for m in "$module" "$module/apis"; do
    json=$(cd "$work/mod" && GOFLAGS=-mod=mod GOWORK=off GO111MODULE=on "$go" mod download -json "$m@$commit" 2>&1) || true
    d=$(printf '%s\n' "$json" | field Dir)
    if [[ -z $d || ! -d $d ]]; then
      log "the module proxy does not serve $m@$commit: $(printf '%s\n' "$json" | field Error | sed 's/\\n\\t/ /g')"
      return 1
    fi
    if [[ $m == "$module" ]]; then
      cp -R "$d" "$src"
    else
      rm -rf "$src/apis"
      cp -R "$d" "$src/apis"
    fi
  done
  chmod -R u+w "$src"
}

# --- source: the snapshot in the repository -------------------------------
# from_snapshot unpacks third_party's tarball of the commit, once its sha256
# is the pinned one; it fails, saying why, otherwise.
from_snapshot() {
  if [[ ! -f $snapshot ]]; then
    log "no snapshot of $commit in the repository ($snapshot)"
    return 1
  fi
  if [[ ! $snapshot_sha256 =~ ^[0-9a-f]{64}$ ]]; then
    log "AUTOSCALER_SNAPSHOT_SHA256 is not set (the Makefile pins it); not using $snapshot"
    return 1
  fi
  local got
  got=$(sha256sum "$snapshot" | cut -d' ' -f1)
  if [[ $got != "$snapshot_sha256" ]]; then
    log "$snapshot has sha256 $got, not the pinned $snapshot_sha256; not using it"
    return 1
  fi
  tar -xzf "$snapshot" -C "$work/src"
}

# --- source: the git repository --------------------------------------------
from_git() {
  command -v git >/dev/null || { log "git is not installed"; return 1; }
  local g=$work/git
  git init -q --bare "$g"
  if ! bg git -C "$g" fetch -q --depth 1 "$git_url" "$commit"; then
    log "git fetch $git_url $commit failed"
    return 1
  fi
  git -C "$g" archive --format=tar "$commit" cluster-autoscaler | tar -x -C "$work/src"
}

t=$(date +%s)
source_from=
if from_proxy; then
  source_from="module proxy ($module@$commit)"
elif rm -rf "$src" && from_snapshot; then
  source_from="snapshot (${snapshot#"$root"/}, sha256 $snapshot_sha256)"
elif rm -rf "$src" && log "fetching the commit from $git_url instead" && from_git; then
  source_from="git ($git_url)"
else
  log "no source for commit $commit: the module proxy refuses it, the repository has no usable snapshot of it, and $git_url cannot be fetched."
  log "Give CAPN_AUTOSCALER_GIT a clone or mirror of github.com/kubernetes/autoscaler holding the commit."
  exit 1
fi
if [[ ! -f $src/go.mod || ! -f $src/apis/go.mod ]]; then
  log "the source of $commit has no cluster-autoscaler/go.mod or apis/go.mod"
  exit 1
fi
note "$(printf '%-24s %4ss  %s' source "$(since "$t")" "$source_from")"

# --- dependencies and the build ---------------------------------------------
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off GO111MODULE=on
t=$(date +%s)
bg "$go" -C "$src" list -tags externalgrpc -deps . >/dev/null
note "$(printf '%-24s %4ss  %s' modules "$(since "$t")" "download (go.sum of the commit)")"
t=$(date +%s)
go_version=$("$go" env GOVERSION)
log "building with $go_version (cold: about 8 minutes of CPU, 22 measured on 2 cores shared with a Kubernetes build; warm Go build cache: under a minute)"
bg "$go" -C "$src" build -tags externalgrpc -trimpath -ldflags "-s -w" -o "$tmp/bin/cluster-autoscaler" .
note "$(printf '%-24s %4ss  %s' cluster-autoscaler "$(since "$t")" "-tags externalgrpc")"

version=$(sed -n 's/^var ClusterAutoscalerVersion = "\(.*\)"$/\1/p' "$src/version/version.go")
{
  echo "cluster-autoscaler ${version:-unknown} (github.com/kubernetes/autoscaler $commit), cloud provider externalgrpc only"
  echo "built with $go_version, CGO_ENABLED=0, -trimpath -ldflags '-s -w', by hack/autoscaler.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  printf '%s\n' "${info[@]}"
  printf '%-24s %4ss\n' total "$(since "$start")"
  echo
  (cd "$tmp/bin" && ls -l cluster-autoscaler | awk '{printf "%-24s %6.1f MiB\n", $NF, $5/1048576}')
} >"$tmp/BUILD-INFO"
rm -rf "$dir"
mv "$tmp" "$dir"
log "built in $(since "$start")s: $out"
echo "$out"
