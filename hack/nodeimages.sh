#!/usr/bin/env bash
# Builds the images kubeadm runs on a real node (issue 26) — pause, etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler (its static pods),
# kube-proxy and CoreDNS (its add-ons) — FROM scratch, as OCI image layout
# archives that `ctr images import` loads under their ordinary names
# (registry.k8s.io/<name>:<tag>, exactly the references
# `kubeadm config images list --kubernetes-version <v>` prints), so that a
# node imports them and pulls nothing. Cached outside the repository, keyed
# by the Kubernetes, etcd, CoreDNS and iptables versions and the archive
# format, reused when present:
#
#   ${CAPN_NODEIMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/nodeimages}/k8s-<v>_etcd-<v>_coredns-<v>_iptables-<v>_oci1/
#     <name>_<tag>.tar   one archive per image
#     images.txt         "<reference> <archive>" per line
#     BUILD-INFO
#
# What goes in:
#   - kube-apiserver, kube-controller-manager, kube-scheduler and etcd: the
#     static binaries `make kube` cached (hack/kube.sh), as
#     /usr/local/bin/<name>, PATH set, a /tmp (1777); kubeadm's static pods
#     name the command. etcd's version must be the one kubeadm's tag asks
#     for (3.7.0-0 is etcd v3.7.0), or the build fails.
#   - pause: Kubernetes' own build/pause/linux/pause.c from the same
#     k8s.io/kubernetes module, compiled static with gcc as its Makefile
#     does (the upstream image is that binary alone).
#   - kube-proxy: the node flavour's static kube-proxy (`make nodestack`) as
#     /usr/local/bin/kube-proxy (kubeadm's DaemonSet names it), and the
#     iptables it runs in its default mode, iptables, which kubeadm's
#     KubeProxyConfiguration leaves as is (capn renders no
#     KubeProxyConfiguration, so the nftables mode would need one more
#     document in every machine's bootstrap data): Debian's iptables package
#     (`apt-get install iptables`), its nf_tables backend xtables-nft-multi
#     copied as iptables, iptables-save, iptables-restore and the ip6tables
#     three (it picks its personality from its name), every extension of
#     /usr/lib/<triplet>/xtables (kube-proxy's rules use comment, mark,
#     conntrack, statistic, DNAT, MASQUERADE, ...; xtables loads them with
#     dlopen, so ldd does not name them), and the shared libraries ldd names
#     for the binary and the extensions, the dynamic loader included, at the
#     paths ldd prints. About 7 MiB besides kube-proxy.
#   - CoreDNS: hack/coredns.sh's static binary (from the Go module proxy,
#     cached by version) as /coredns, the entrypoint (kubeadm's Deployment
#     passes only -conf). Unlike the upstream image it runs as root (no file
#     capability for port 53 in a layer written here): kubeadm's Deployment
#     drops every capability but NET_BIND_SERVICE and makes the root file
#     system read-only. Its version must be the one kubeadm's tag names.
#   - The tags: kubeadm of the same version (hack/kube.sh's node flavour,
#     `make nodestack`) is asked.
#
# The archives are written by `capn-node image` (cmd/capn-node/ociimage:
# one uncompressed layer, deterministic bytes) rather than Docker build and
# save: no daemon is needed (a bring-your-own host has none), the digests
# are reproducible, and nothing is copied through a build context.
#
# Usage: hack/nodeimages.sh [--print-path]
set -euo pipefail

kube_version=${KUBE_VERSION:-v1.37.2}
etcd_version=${ETCD_VERSION:-v3.7.0}
coredns_version=${COREDNS_VERSION:-v1.14.6}
format=oci1
# iptables of the kube-proxy image: Debian's nf_tables backend.
xtables=${CAPN_XTABLES:-/usr/sbin/xtables-nft-multi}
iptables_version=none
if [[ -x $xtables ]]; then
  iptables_version=$("$xtables" iptables --version | sed -n 's/^iptables v\([0-9.]*\).*/\1/p')
fi
cache=${CAPN_NODEIMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/nodeimages}
dir=$cache/k8s-${kube_version}_etcd-${etcd_version}_coredns-${coredns_version}_iptables-${iptables_version}_$format
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

case ${1:-} in
  --print-path) echo "$dir"; exit 0 ;;
  '') ;;
  *) echo "usage: hack/nodeimages.sh [--print-path]" >&2; exit 2 ;;
esac
if [[ -f $dir/images.txt ]]; then
  echo "$dir"
  exit 0
fi

log() { echo "nodeimages: $*" >&2; }
control=$(KUBE_VERSION=$kube_version ETCD_VERSION=$etcd_version "$here/kube.sh" --print-path)
node=$(KUBE_VERSION=$kube_version KUBE_FLAVOUR=node "$here/kube.sh" --print-path)
for b in "$control/etcd" "$control/kube-apiserver" "$control/kube-controller-manager" "$control/kube-scheduler" "$node/kubeadm" "$node/kube-proxy"; do
  if [[ ! -x $b ]]; then
    log "$b is missing: run make kube nodestack first"
    exit 1
  fi
done
if [[ $iptables_version == none ]]; then
  log "the kube-proxy image needs Debian's iptables ($xtables): apt-get install iptables"
  exit 1
fi
command -v ldd >/dev/null || { log "the kube-proxy image's libraries are found with ldd (apt-get install libc-bin)"; exit 1; }
command -v "${CC:-gcc}" >/dev/null || { log "the pause image needs a C compiler (apt-get install gcc libc6-dev)"; exit 1; }

mkdir -p "$cache"
if command -v flock >/dev/null; then
  exec 9>"$cache/.lock"
  flock 9
  if [[ -f $dir/images.txt ]]; then
    echo "$dir"
    exit 0
  fi
fi

go=${GO:-go}
start=$(date +%s)
tmp=$dir.tmp
work=$(mktemp -d)
trap 'rm -rf "$work" "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"

# The references kubeadm of this version runs.
mapfile -t refs < <("$node/kubeadm" config images list --kubernetes-version "$kube_version")
ref_of() {
  local r
  for r in "${refs[@]}"; do
    case $r in */"$1":*) echo "$r"; return 0 ;; esac
  done
  log "kubeadm $kube_version lists no $1 image: ${refs[*]}"
  return 1
}

# etcd's tag is <etcd version>-<revision>.
etcd_ref=$(ref_of etcd)
etcd_tag=${etcd_ref##*:}
have=$("$control/etcd" --version | sed -n 's/^etcd Version: //p')
if [[ v${etcd_tag%-*} != "v$have" ]]; then
  log "kubeadm $kube_version runs $etcd_ref, but the cached etcd is $have (ETCD_VERSION=$etcd_version): set ETCD_VERSION=v${etcd_tag%-*}"
  exit 1
fi

# CoreDNS's tag is its version.
coredns_ref=$(ref_of coredns)
if [[ ${coredns_ref##*:} != "$coredns_version" ]]; then
  log "kubeadm $kube_version runs $coredns_ref, but COREDNS_VERSION is $coredns_version: set COREDNS_VERSION=${coredns_ref##*:}"
  exit 1
fi
coredns=$(COREDNS_VERSION=$coredns_version GO=$go "$here/coredns.sh" | tail -n 1)/coredns

# pause, from the Kubernetes module's source.
k8s_dir=$(cd "$work" && GOFLAGS=-mod=mod GO111MODULE=on "$go" mod download -json "k8s.io/kubernetes@$kube_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
pause_ref=$(ref_of pause)
"${CC:-gcc}" -Os -Wall -Werror -static -DVERSION="v${pause_ref##*:}-capn" -o "$work/pause" "$k8s_dir/build/pause/linux/pause.c"
strip "$work/pause" 2>/dev/null || true

(cd "$repo" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 "$go" build -trimpath -o "$work/capn-node" ./cmd/capn-node)

info=()
image() { # image <reference> <capn-node image flags...>
  local ref=$1 t out
  shift
  t=$(date +%s)
  out=$(echo "${ref#*/}" | tr '/:' '__').tar
  "$work/capn-node" image --ref "$ref" --out "$tmp/$out" "$@"
  echo "$ref $out" >>"$tmp/images.txt.tmp"
  info+=("$(printf '%-52s %4ss %7.1f MiB' "$ref" $(($(date +%s) - t)) "$(du -k "$tmp/$out" | awk '{print $1/1024}')")")
}
path=PATH=/usr/local/bin:/usr/bin:/bin
image "$pause_ref" --file "pause=$work/pause" --entrypoint /pause
image "$etcd_ref" --file "usr/local/bin/etcd=$control/etcd" --dir tmp=1777 --env "$path" --entrypoint /usr/local/bin/etcd
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  image "$(ref_of $c)" --file "usr/local/bin/$c=$control/$c" --dir tmp=1777 --env "$path" --entrypoint "/usr/local/bin/$c"
done

# kube-proxy with iptables: the multi-call binary under each name
# kube-proxy runs, its extensions, and every library ldd names.
# The extensions' directory is compiled into libxtables; Debian's is
# /usr/lib/<multiarch triplet>/xtables.
xtdir=${CAPN_XTABLES_LIBDIR:-/usr/lib/$("${CC:-gcc}" -print-multiarch)/xtables}
[[ -d $xtdir ]] || { log "no iptables extensions in $xtdir (set CAPN_XTABLES_LIBDIR)"; exit 1; }
proxy=(--file "usr/local/bin/kube-proxy=$node/kube-proxy")
for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  proxy+=(--file "usr/sbin/$n=$xtables")
done
exts=("$xtdir"/*.so)
for e in "${exts[@]}"; do
  proxy+=(--file "${e#/}=$e")
done
libs=$(for f in "$xtables" "${exts[@]}"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
for l in $libs; do
  proxy+=(--file "${l#/}=$l")
done
image "$(ref_of kube-proxy)" "${proxy[@]}" --dir tmp=1777 --dir run=0755 --env "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" --entrypoint /usr/local/bin/kube-proxy
image "$coredns_ref" --file "coredns=$coredns" --dir tmp=1777 --entrypoint /coredns
mv "$tmp/images.txt.tmp" "$tmp/images.txt"
{
  echo "kubeadm $kube_version images, FROM scratch, OCI layout archives (capn-node image), by hack/nodeimages.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binaries: $control (etcd $have), $node/kube-proxy, pause from $k8s_dir/build/pause/linux/pause.c ($("${CC:-gcc}" --version | head -n 1)), $coredns"
  echo "kube-proxy's iptables: $xtables ($("$xtables" iptables --version)), ${#exts[@]} extensions from $xtdir, libraries: $(echo $libs)"
  echo "not built: $(printf '%s\n' "${refs[@]}" | { grep -v -x -F -f <(cut -d' ' -f1 "$tmp/images.txt") || true; } | tr '\n' ' ')"
  echo
  printf '%s\n' "${info[@]}"
  printf 'total %ss\n' $(($(date +%s) - start))
} >"$tmp/BUILD-INFO"
rm -rf "$dir"
mv "$tmp" "$dir"
log "built in $(($(date +%s) - start))s: $dir"
echo "$dir"
