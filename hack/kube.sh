#!/usr/bin/env bash
# Builds the real Kubernetes binaries capn's workload clusters run — etcd,
# etcdctl, etcdutl (etcd restores), kube-apiserver, kube-controller-manager, kube-scheduler, kubectl —
# and kwok (fake nodes for tests), of one Kubernetes version (KUBE_VERSION;
# `make kube` runs it for each of the Makefile's KUBE_VERSIONS), and prints
# the directory they are in. They are cached outside the repository, one
# directory per version, keyed by the three versions, and reused when
# present:
#
#   ${CAPN_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/kube}/k8s-<v>_etcd-<v>_kwok-<v>/bin/
#
# etcd, etcdctl and kwok are built once: another version's complete
# directory with the same etcd and kwok versions, built by the same Go,
# lends them (hard links).
#
# As in hack/npd.sh, nothing is installed with `go install …@version` (this
# machine's module proxy refuses version lists): each project is fetched with
# `go mod download` and built from a small generated module in a temporary
# directory, outside the repository (its go.mod and go.sum are never
# touched):
#   - etcd: go.etcd.io/etcd/server/v3 (its root package is etcd's main) and
#     go.etcd.io/etcd/etcdctl/v3. Their own go.mod files replace the other
#     etcd modules with ../ paths, which a build as a dependency ignores; the
#     required versions are the same release.
#   - Kubernetes: k8s.io/kubernetes replaces every staging module
#     (k8s.io/api, k8s.io/client-go, …) with ./staging/src/k8s.io/<x>, which
#     is not in the module zip. The build module requires k8s.io/kubernetes
#     and replaces each staging module listed in its go.mod with the published
#     k8s.io/<x> v0.<minor>.<patch> (sample-cli-plugin and sample-controller
#     are left out: nothing needs them). Binaries are version-stamped the way
#     hack/lib/version.sh does, with the module's release time as build date,
#     so `kubectl version` reports the real version and rebuilds are equal.
#   - kwok: sigs.k8s.io/kwok, ./cmd/kwok.
# Everything is static (CGO_ENABLED=0), -trimpath, -s -w. The binaries go to
# <dir>.tmp, which is renamed to <dir> only when every one of them built, so
# an interrupted build never leaves a cache that looks complete.
#
# Progress and timings go to stderr (and <dir>/BUILD-INFO); the last line on
# stdout is the bin directory.
#
# KUBE_FLAVOUR=node builds, with the same plumbing (generated module,
# stamps, .tmp then rename), a real node's Kubernetes binaries instead —
# kubelet, kubeadm, kube-proxy (issue 26; hack/nodestack.sh --kube) — into
# their own directory k8s-<v>_node, so that neither flavour's cache makes
# the other look incomplete.
#
# Usage: hack/kube.sh [--print-path]
#   --print-path  print where the binaries are (or would be) and exit 0.
set -euo pipefail
name=kube
. "$(dirname "$0")/lib.sh"

kube_version=${KUBE_VERSION:-v1.37.2}
etcd_version=${ETCD_VERSION:-v3.7.0}
kwok_version=${KWOK_VERSION:-v0.8.0}
cache=${CAPN_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/kube}
dir=$cache/k8s-${kube_version}_etcd-${etcd_version}_kwok-${kwok_version}
bin=$dir/bin
binaries=(etcd etcdctl etcdutl kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
flavour=${KUBE_FLAVOUR:-control}
case $flavour in
  control) ;;
  node)
    dir=$cache/k8s-${kube_version}_node
    bin=$dir/bin
    binaries=(kubelet kubeadm kube-proxy)
    kube_cmds=("${binaries[@]}")
    ;;
  *) log "KUBE_FLAVOUR is \"$flavour\"; allowed: control, node"; exit 2 ;;
esac

complete() {
  local b
  for b in "${binaries[@]}"; do
    [[ -x $bin/$b ]] || return 1
  done
}

case ${1:-} in
  --print-path) echo "$bin"; exit 0 ;;
  '') ;;
  *) echo "usage: hack/kube.sh [--print-path]" >&2; exit 2 ;;
esac
if complete; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache"
# One build at a time per cache (CI and a developer may share it); the node
# flavour has its own lock, so that it need not wait for a control build.
lock=$cache/.lock
[[ $flavour == node ]] && lock=$cache/.lock-node
take_lock "$lock"
if complete; then
  echo "$bin"
  exit 0
fi

go=${GO:-go}
workspace "$dir"

# The build modules are generated here: -mod=mod lets them get their go.sum
# lines, whatever GOFLAGS says outside (CI exports -mod=readonly).
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off GO111MODULE=on

start=$(date +%s)
# download <module@version> <json-key>: downloads outside any module and
# prints the field (Dir, GoMod, Info).
download() {
  local out
  out=$(cd "$work" && "$go" mod download -json "$1") || { echo "$out" >&2; return 1; }
  printf '%s\n' "$out" | field "$2"
}

# build <module dir> <output name> <package> [ldflags]
build() {
  local t
  t=$(date +%s)
  gorun -C "$1" build -trimpath -ldflags "-s -w ${4:-}" -o "$tmp/bin/$2" "$3"
  note "$(printf '%-24s %4ss  %s' "$2" "$(since "$t")" "$3")"
}

go_version=$("$go" env GOVERSION)

# A cache directory built before etcdutl was added (everything else there)
# gets etcdutl alone, built in place (about a minute), not a whole rebuild.
missing=()
for b in "${binaries[@]}"; do [[ -x $bin/$b ]] || missing+=("$b"); done
if [[ $flavour == control && ${missing[*]} == etcdutl ]]; then
  t=$(date +%s)
  mkdir -p "$work/etcdutl"
  printf 'module capn.local/etcdutlbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/etcdutl/v3 %s\n' "$etcd_version" >"$work/etcdutl/go.mod"
  gorun -C "$work/etcdutl" list -deps go.etcd.io/etcd/etcdutl/v3 >/dev/null
  gorun -C "$work/etcdutl" build -trimpath -ldflags "-s -w" -o "$bin/etcdutl.tmp" go.etcd.io/etcd/etcdutl/v3
  mv "$bin/etcdutl.tmp" "$bin/etcdutl"
  printf '%-24s %4ss  %s\n' etcdutl "$(since "$t")" "go.etcd.io/etcd/etcdutl/v3 (added to this directory later)" >>"$dir/BUILD-INFO"
  log "added etcdutl to $bin in $(since "$t")s"
  echo "$bin"
  exit 0
fi
log "building into $tmp with $go_version (a cold build takes about 25 minutes on 2 cores, a warm Go build cache under a minute)"

# etcd, etcdctl and kwok depend only on their own versions and Go's, not on
# Kubernetes': a complete cache directory of another Kubernetes version with
# the same etcd and kwok versions, built with the same Go, lends them (hard
# links, or copies across file systems) instead of a rebuild.
shared=(etcd etcdctl etcdutl kwok)
donor=
for d in "$cache"/k8s-*_etcd-"${etcd_version}"_kwok-"${kwok_version}"; do
  [[ $flavour == control && $d != "$dir" && -f $d/BUILD-INFO ]] || continue
  grep -q "^built with $go_version," "$d/BUILD-INFO" || continue
  ok=1
  for b in "${shared[@]}"; do [[ -x $d/bin/$b ]] || ok=; done
  [[ -n $ok ]] && { donor=$d; break; }
done

# --- modules ---------------------------------------------------------------
t=$(date +%s)
k8s_mod=$(download "k8s.io/kubernetes@$kube_version" GoMod)
k8s_info=$(download "k8s.io/kubernetes@$kube_version" Info)
if [[ ! -f $k8s_mod || ! -f $k8s_info ]]; then
  log "go mod download k8s.io/kubernetes@$kube_version gave no go.mod or .info"
  exit 1
fi
# Staging modules: the replace lines `k8s.io/<x> => ./staging/src/k8s.io/<x>`.
staging=$(sed -n 's#^[[:space:]]*\(replace[[:space:]]\{1,\}\)\{0,1\}\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\2#p' "$k8s_mod" |
  grep -v -x -e k8s.io/sample-cli-plugin -e k8s.io/sample-controller || true)
if [[ -z $staging ]]; then
  log "found no staging replaces in k8s.io/kubernetes@$kube_version's go.mod"
  exit 1
fi
staging_version=v0.${kube_version#v1.}
k8s_go=$(sed -n 's/^go \([0-9][0-9.]*\)[[:space:]]*$/\1/p' "$k8s_mod")
# The release's time (seconds only) is the build date: reproducible.
release_time=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$k8s_info" | sed 's/\.[0-9]*Z$/Z/')
kube_minor=${kube_version#v1.}
kube_minor=${kube_minor%%.*}

mkdir -p "$work/kube" "$work/etcd" "$work/kwok"
{
  echo "module capn.local/kubebuild"
  echo
  echo "go ${k8s_go:-1.26.0}"
  echo
  echo "require k8s.io/kubernetes $kube_version"
  echo
  echo "replace ("
  for m in $staging; do
    echo "	$m => $m $staging_version"
  done
  echo ")"
} >"$work/kube/go.mod"
printf 'module capn.local/etcdbuild\n\ngo 1.26.0\n\nrequire (\n\tgo.etcd.io/etcd/server/v3 %s\n\tgo.etcd.io/etcd/etcdctl/v3 %s\n\tgo.etcd.io/etcd/etcdutl/v3 %s\n)\n' \
  "$etcd_version" "$etcd_version" "$etcd_version" >"$work/etcd/go.mod"
printf 'module capn.local/kwokbuild\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok %s\n' "$kwok_version" >"$work/kwok/go.mod"

kube_pkgs=()
for c in "${kube_cmds[@]}"; do kube_pkgs+=("k8s.io/kubernetes/cmd/$c"); done
# Loading every package fetches what the builds need and writes go.sum.
if [[ $flavour == control && -z $donor ]]; then
  gorun -C "$work/etcd" list -deps go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3 >/dev/null
  gorun -C "$work/kwok" list -deps sigs.k8s.io/kwok/cmd/kwok >/dev/null
fi
gorun -C "$work/kube" list -deps "${kube_pkgs[@]}" >/dev/null
note "$(printf '%-24s %4ss  %s' "modules" "$(since "$t")" "download and resolve ($(wc -w <<<"$staging") staging modules at $staging_version)")"

# --- binaries --------------------------------------------------------------
if [[ -n $donor ]]; then
  for b in "${shared[@]}"; do
    ln "$donor/bin/$b" "$tmp/bin/$b" 2>/dev/null || cp -p "$donor/bin/$b" "$tmp/bin/$b"
    note "$(printf '%-24s %4ss  %s' "$b" 0 "from $donor (same version, same Go)")"
  done
elif [[ $flavour == control ]]; then
  build "$work/etcd" etcd go.etcd.io/etcd/server/v3
  build "$work/etcd" etcdctl go.etcd.io/etcd/etcdctl/v3
  build "$work/etcd" etcdutl go.etcd.io/etcd/etcdutl/v3
  build "$work/kwok" kwok sigs.k8s.io/kwok/cmd/kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}"
fi
stamp=()
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=("-X $p.gitVersion=$kube_version" "-X $p.gitMajor=1" "-X $p.gitMinor=$kube_minor"
    "-X $p.gitCommit=" "-X $p.gitTreeState=clean" "-X $p.buildDate=${release_time:-1970-01-01T00:00:00Z}")
done
for c in "${kube_cmds[@]}"; do
  build "$work/kube" "$c" "k8s.io/kubernetes/cmd/$c" "${stamp[*]}"
done

# --- into place -------------------------------------------------------------
for b in "${binaries[@]}"; do
  [[ -x $tmp/bin/$b ]] || { log "$b was not built"; exit 1; }
done
{
  if [[ $flavour == node ]]; then
    echo "kubernetes $kube_version (staging modules $staging_version), node binaries"
  else
    echo "kubernetes $kube_version (staging modules $staging_version), etcd $etcd_version, kwok $kwok_version"
  fi
  echo "built with $go_version, CGO_ENABLED=0, -trimpath -ldflags '-s -w', by hack/kube.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  printf '%s\n' "${info[@]}"
  printf '%-24s %4ss\n' total "$(since "$start")"
  echo
  (cd "$tmp/bin" && ls -l "${binaries[@]}" | awk '{printf "%-24s %6.1f MiB\n", $NF, $5/1048576}')
} >"$tmp/BUILD-INFO"
rm -rf "$dir"
mv "$tmp" "$dir"
log "built in $(since "$start")s: $bin"
echo "$bin"
