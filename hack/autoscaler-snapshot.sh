#!/usr/bin/env bash
# Regenerates third_party/cluster-autoscaler/: a pruned, unmodified snapshot
# of cluster-autoscaler/ at the pinned commit of github.com/kubernetes/autoscaler,
# from which hack/autoscaler.sh builds the cluster-autoscaler when the module
# proxy refuses the commit (it does: 403) and there is no git remote (CI).
#
# The snapshot is `git archive` of the commit restricted to what
# `go build -tags externalgrpc .` compiles: the directories of the packages
# of the cluster-autoscaler and cluster-autoscaler/apis modules that
# `go list -tags externalgrpc -deps .` reports (so only the cloud providers
# the build imports: cloudprovider, builder, externalgrpc and the few shared
# subpackages it proves it needs), their non-test .go files and embedded
# files, and both modules' go.mod and go.sum. No tests, vendor/, docs,
# charts or proposals. Files are byte-for-byte upstream's; gzip -n keeps the
# tarball reproducible (same commit, same bytes, same sha256).
#
# Usage: hack/autoscaler-snapshot.sh <git dir or clone holding the commit> [commit]
#   commit defaults to the Makefile's AUTOSCALER_COMMIT. Needs go and the
#   commit's dependencies (module proxy or a warm module cache).
# Then put the printed sha256 in the Makefile's AUTOSCALER_SNAPSHOT_SHA256.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=${1:?usage: hack/autoscaler-snapshot.sh <git dir of github.com/kubernetes/autoscaler> [commit]}
commit=${2:-$(sed -n 's/^AUTOSCALER_COMMIT ?= \([0-9a-f]\{40\}\)$/\1/p' Makefile)}
if [[ ! $commit =~ ^[0-9a-f]{40}$ ]]; then
  echo "autoscaler-snapshot: commit must be a full 40-hex commit, not '$commit'" >&2
  exit 2
fi
git -C "$repo" cat-file -e "$commit^{commit}"
out=third_party/cluster-autoscaler
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The whole cluster-autoscaler/ tree, only to ask go what the build compiles.
git -C "$repo" archive "$commit" cluster-autoscaler | tar -x -C "$work"
src=$work/cluster-autoscaler
GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 GO111MODULE=on \
  go -C "$src" list -tags externalgrpc -deps \
  -f '{{if .Module}}{{if eq .Module.Path "k8s.io/autoscaler/cluster-autoscaler" "k8s.io/autoscaler/cluster-autoscaler/apis"}}{{.Dir}}{{range .EmbedFiles}} {{$.Dir}}/{{.}}{{end}}{{end}}{{end}}' . \
  >"$work/dirs"

specs=(cluster-autoscaler/go.mod cluster-autoscaler/go.sum
  cluster-autoscaler/apis/go.mod cluster-autoscaler/apis/go.sum)
while read -r dir embeds; do
  [[ -n $dir ]] || continue
  rel=cluster-autoscaler${dir#"$src"}
  specs+=(":(glob)$rel/*.go")
  for e in $embeds; do specs+=("cluster-autoscaler${e#"$src"}"); done
done <"$work/dirs"
specs+=(":(exclude,glob)cluster-autoscaler/**/*_test.go" ":(exclude,glob)cluster-autoscaler/*_test.go")

mkdir -p "$out"
rm -f "$out"/cluster-autoscaler-*.tar.gz
tarball=$out/cluster-autoscaler-$commit.tar.gz
git -C "$repo" archive --format=tar "$commit" -- "${specs[@]}" | gzip -n -9 >"$tarball"
git -C "$repo" show "$commit:LICENSE" >"$out/LICENSE"
files=$(tar -tzf "$tarball" | grep -vc '/$')
echo "autoscaler-snapshot: $tarball: $files files, $(wc -c <"$tarball") bytes" >&2
echo "AUTOSCALER_SNAPSHOT_SHA256 = $(sha256sum "$tarball" | cut -d' ' -f1)"
