#!/usr/bin/env bash
# Builds the node side of a real Kubernetes node (issue 26) and prints where
# it is: containerd v2 (containerd, containerd-shim-runc-v2, ctr), runc, and
# the CNI plugins bridge, host-local, loopback and portmap, cached outside
# the repository, keyed by the three versions, reused when present:
#
#   ${CAPN_NODESTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/nodestack}/containerd-<v>_runc-<v>_cni-<v>/bin/
#
# kubelet, kubeadm and kube-proxy come from hack/kube.sh's node flavour
# (KUBE_FLAVOUR=node: the same generated Kubernetes build module, another
# binaries list, its own cache directory k8s-<v>_node); with --kube this
# script builds them too after its own part, and the last line on stdout is
# then "<nodestack bin>:<kube node bin>" (the form `make -s nodestack-bin`
# prints).
#
# As in hack/kube.sh, nothing is installed with `go install …@version`:
# each project is fetched with `go mod download` and built from a small
# generated module in a temporary directory (the repository's go.mod is
# never touched). None of the three replaces modules in its go.mod, so a
# build as a dependency gets the same build list.
#   - containerd, ctr, containerd-shim-runc-v2: static (CGO_ENABLED=0, as
#     containerd's Makefile builds the shim; the btrfs snapshotter, which
#     needs cgo, is left out — overlayfs and native are in), version-stamped.
#   - runc: cgo, static, with the seccomp tag against Debian's libseccomp-dev
#     (pkg-config finds it). Its Makefile's default tag libpathrs (a Rust
#     library Debian 12 does not ship) is left out: runc then uses its
#     built-in pure-Go path-safety code (features_pathrslite.go).
#   - CNI plugins: static, BuildVersion stamped.
# The binaries go to <dir>.tmp, renamed to <dir> only when all built.
# Progress and timings go to stderr and <dir>/BUILD-INFO.
#
# Usage: hack/nodestack.sh [--print-path | --kube]
set -euo pipefail
name=nodestack
. "$(dirname "$0")/lib.sh"

containerd_version=${CONTAINERD_VERSION:-v2.4.2}
runc_version=${RUNC_VERSION:-v1.5.3}
cni_version=${CNI_PLUGINS_VERSION:-v1.10.0}
cache=${CAPN_NODESTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/nodestack}
dir=$cache/containerd-${containerd_version}_runc-${runc_version}_cni-${cni_version}
bin=$dir/bin
binaries=(containerd containerd-shim-runc-v2 ctr runc bridge host-local loopback portmap)
here=$(cd "$(dirname "$0")" && pwd)

kube=
case ${1:-} in
  --print-path)
    echo "$bin:$(KUBE_FLAVOUR=node "$here/kube.sh" --print-path)"
    exit 0
    ;;
  --kube) kube=1 ;;
  '') ;;
  *) echo "usage: hack/nodestack.sh [--print-path | --kube]" >&2; exit 2 ;;
esac

complete() {
  local b
  for b in "${binaries[@]}"; do
    [[ -x $bin/$b ]] || return 1
  done
}
finish() {
  if [[ -n $kube ]]; then
    local kb
    kb=$(KUBE_FLAVOUR=node "$here/kube.sh" | tail -n 1)
    echo "$bin:$kb"
  else
    echo "$bin"
  fi
  exit 0
}
complete && finish

mkdir -p "$cache"
take_lock "$cache/.lock"
if complete; then
  exec 9>&-
  finish
fi

go=${GO:-go}
workspace "$dir"

export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off GO111MODULE=on

start=$(date +%s)
load=$(cut -d' ' -f1-3 /proc/loadavg)

# build <module dir> <output name> <package> [ldflags] [tags]
build() {
  local t
  t=$(date +%s)
  gorun -C "$1" build -trimpath -tags "${5:-}" -ldflags "-s -w ${4:-}" -o "$tmp/bin/$2" "$3"
  note "$(printf '%-24s %4ss  %s' "$2" "$(since "$t")" "$3")"
}

go_version=$("$go" env GOVERSION)
log "building into $tmp with $go_version (load average $load on $(nproc) cores; measured cold: about 13 minutes under a load of 20)"

containerd=github.com/containerd/containerd/v2
runc=github.com/opencontainers/runc
cni=github.com/containernetworking/plugins
cni_pkgs=($cni/plugins/main/bridge $cni/plugins/ipam/host-local $cni/plugins/main/loopback $cni/plugins/meta/portmap)
mkdir -p "$work/containerd" "$work/runc" "$work/cni"
printf 'module capn.local/containerdbuild\n\ngo 1.26.0\n\nrequire %s %s\n' "$containerd" "$containerd_version" >"$work/containerd/go.mod"
printf 'module capn.local/runcbuild\n\ngo 1.26.0\n\nrequire %s %s\n' "$runc" "$runc_version" >"$work/runc/go.mod"
printf 'module capn.local/cnibuild\n\ngo 1.26.0\n\nrequire %s %s\n' "$cni" "$cni_version" >"$work/cni/go.mod"

t=$(date +%s)
gorun -C "$work/containerd" list -deps $containerd/cmd/containerd $containerd/cmd/ctr $containerd/cmd/containerd-shim-runc-v2 >/dev/null
CGO_ENABLED=1 gorun -C "$work/runc" list -tags "seccomp urfave_cli_no_docs netgo osusergo" -deps $runc >/dev/null
gorun -C "$work/cni" list -deps "${cni_pkgs[@]}" >/dev/null
note "$(printf '%-24s %4ss  %s' modules "$(since "$t")" "download and resolve")"

stamp="-X $containerd/version.Version=$containerd_version -X $containerd/version.Package=$containerd"
build "$work/containerd" containerd $containerd/cmd/containerd "$stamp" urfave_cli_no_docs
build "$work/containerd" containerd-shim-runc-v2 $containerd/cmd/containerd-shim-runc-v2 "$stamp" urfave_cli_no_docs
build "$work/containerd" ctr $containerd/cmd/ctr "$stamp" urfave_cli_no_docs
if ! pkg-config --exists libseccomp; then
  log "runc needs libseccomp's headers and pkg-config: apt-get install libseccomp-dev pkg-config"
  exit 1
fi
CGO_ENABLED=1 build "$work/runc" runc $runc "-extldflags -static" "seccomp urfave_cli_no_docs netgo osusergo"
for p in "${cni_pkgs[@]}"; do
  build "$work/cni" "${p##*/}" "$p" "-X $cni/pkg/utils/buildversion.BuildVersion=$cni_version"
done

for b in "${binaries[@]}"; do
  [[ -x $tmp/bin/$b ]] || { log "$b was not built"; exit 1; }
done
{
  echo "containerd $containerd_version, runc $runc_version (seccomp, libseccomp $(pkg-config --modversion libseccomp), no libpathrs), CNI plugins $cni_version"
  echo "built with $go_version, -trimpath -ldflags '-s -w', by hack/nodestack.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ), load average at start $load, at end $(cut -d' ' -f1-3 /proc/loadavg), on $(nproc) cores"
  echo
  printf '%s\n' "${info[@]}"
  printf '%-24s %4ss\n' total "$(since "$start")"
  echo
  (cd "$tmp/bin" && ls -l "${binaries[@]}" | awk '{printf "%-24s %6.1f MiB\n", $NF, $5/1048576}')
} >"$tmp/BUILD-INFO"
rm -rf "$dir"
mv "$tmp" "$dir"
log "built in $(since "$start")s: $bin"
exec 9>&- 2>/dev/null || true
finish
