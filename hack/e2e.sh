#!/usr/bin/env bash
# Builds the upstream Kubernetes conformance tests of one Kubernetes version
# (KUBE_VERSION) and the images they run, for providers/process's
# TestRealNodesConformance (issue 26, `make conformance`), and prints the
# directory they are in. Cached outside the repository, keyed by the
# Kubernetes and ginkgo versions, busybox's, the image format and the image
# set's revision, reused when present:
#
#   ${CAPN_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/e2e}/k8s-<v>_ginkgo-<v>_busybox-<v>_oci1_images<n>/
#     bin/e2e.test    `go test -c` of k8s.io/kubernetes/test/e2e, as upstream's
#                     build makes it (make WHAT=test/e2e/e2e.test: -trimpath,
#                     -s -w, version-stamped), static, without its build
#                     tags (below)
#     bin/ginkgo      github.com/onsi/ginkgo/v2/ginkgo at the version
#                     k8s.io/kubernetes's go.mod requires
#     bin/agnhost     k8s.io/kubernetes/test/images/agnhost
#     images/<name>_<tag>.tar   OCI archives for `ctr images import`
#     images.txt      "<reference> <archive>" per line
#     BUILD-INFO      versions, timings, what was not built and why
#
# As hack/kube.sh does, nothing is installed with `go install …@version`:
# the modules come from the Go module proxy (`go mod download`), and the
# build is a small generated module in a temporary directory that requires
# k8s.io/kubernetes and replaces each staging module its go.mod names
# (./staging/src/k8s.io/<x>, not in the module zip) with the published
# k8s.io/<x> v0.<minor>.<patch>.
#
# Upstream builds with -tags selinux,notest,grpcnotrace. They are left out,
# as hack/kube.sh leaves them out of the Kubernetes binaries, so that this
# build reuses that one's Go build cache: grpcnotrace changes gRPC's
# files, and so every package above gRPC (the API machinery, client-go,
# most of k8s.io/kubernetes) would be compiled again (measured: 7 minutes
# in, still compiling pkg/registry). selinux only adds SELinux label
# support to opencontainers/selinux (the nodes here have none), notest
# leaves test-only code out of a few packages.
#
# The images, FROM scratch, written by `capn-node image` (cmd/capn-node/
# ociimage) under the exact references e2e.test asks for
# (test/utils/image/manifest.go of the same module):
#   - agnhost: the agnhost binary as /agnhost (and /agnhost-2, the
#     entrypoint tests' second name), its porter certificate, /uploads,
#     the busybox image's files (below) and Debian's dig, getent, curl and
#     OpenBSD nc with the libraries ldd names: what the chosen specs run in
#     it through a shell (upstream's image is Alpine with bind-tools, curl,
#     netcat, iproute2, bash).
#   - busybox: Debian's busybox-static (/bin/busybox and a link per applet)
#     and Debian's bash as sh (below: why).
#   - glibc-dns-testing (the DNS specs' glibc querier; upstream's is Debian
#     with dnsutils): busybox and the same Debian tools as agnhost's.
#   - pause: not built here: e2e.test's pause is kubeadm's
#     (registry.k8s.io/pause:3.10.2 for v1.37.2), which hack/nodeimages.sh
#     builds and every node imports; the test checks they agree.
#   - Not built: agnhost 2.55 (the manifest's AgnhostPrev: the agnhost
#     VERSION of no k8s.io/kubernetes release found on the module proxy —
#     v1.33.0 and v1.33.4 have 2.53, v1.34.0 2.56), nginx (upstream's is
#     nginx on Debian; neither the module proxy nor this host has one), and
#     the other manifest images (sample-apiserver, kitten/nautilus, perl,
#     volume servers, CSI sidecars, ...), which the chosen specs do not
#     run; the test skips the three chosen specs that run agnhost 2.55.
#
# Usage: hack/e2e.sh [--print-path]
set -euo pipefail
name=e2e
. "$(dirname "$0")/lib.sh"

kube_version=${KUBE_VERSION:-v1.37.2}
format=oci1
# The set of images below; one more is a new cache directory.
images_rev=3
busybox=${CAPN_BUSYBOX:-/bin/busybox}
busybox_version=none
if [[ -x $busybox ]]; then
  busybox_version=$("$busybox" 2>&1 | sed -n '1s/^BusyBox v\([0-9.]*\).*/\1/p')
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${CAPN_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/e2e}
go=${GO:-go}

# The ginkgo version is k8s.io/kubernetes's requirement; finding it needs
# the module's go.mod (a small download, cached by Go).
modfile() {
  (cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod GO111MODULE=on GOWORK=off "$go" mod download -json "k8s.io/kubernetes@$kube_version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
}
k8s_mod=$(modfile)
ginkgo_version=$(sed -n 's#^[[:space:]]*github.com/onsi/ginkgo/v2 \(v[^ ]*\).*#\1#p' "$k8s_mod" | head -n 1)
[[ -n $ginkgo_version ]] || { log "k8s.io/kubernetes@$kube_version's go.mod requires no github.com/onsi/ginkgo/v2"; exit 1; }
dir=$cache/k8s-${kube_version}_ginkgo-${ginkgo_version}_busybox-${busybox_version}_${format}_images${images_rev}

case ${1:-} in
  --print-path) echo "$dir"; exit 0 ;;
  '') ;;
  *) echo "usage: hack/e2e.sh [--print-path]" >&2; exit 2 ;;
esac
if [[ -f $dir/images.txt ]]; then
  echo "$dir"
  exit 0
fi
[[ $busybox_version != none ]] || { log "the busybox and agnhost images need Debian's busybox-static ($busybox): apt-get install busybox-static"; exit 1; }
command -v ldd >/dev/null || { log "the agnhost image's libraries are found with ldd (apt-get install libc-bin)"; exit 1; }
# <name in the image>=<Debian's binary>: the tools upstream's Alpine agnhost
# has that the chosen specs run (DNS: dig, getent; Services: curl, and nc
# with -v -t -u, which busybox's nc lacks).
bash=${CAPN_BASH:-/usr/bin/bash}
[[ -x $bash ]] || { log "the e2e images' sh is Debian's bash ($bash): apt-get install bash"; exit 1; }
agnhost_tools=(dig=/usr/bin/dig getent=/usr/bin/getent curl=/usr/bin/curl nc=/usr/bin/nc.openbsd)
for t in "${agnhost_tools[@]}"; do
  [[ -x ${t#*=} ]] || { log "the agnhost image needs ${t#*=} (apt-get install bind9-dnsutils libc-bin curl netcat-openbsd)"; exit 1; }
done

mkdir -p "$cache"
take_lock "$cache/.lock"
if [[ -f $dir/images.txt ]]; then
  echo "$dir"
  exit 0
fi

workspace "$dir"
mkdir -p "$tmp/images"

export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off GO111MODULE=on

start=$(date +%s)
load=$(cut -d' ' -f1-3 /proc/loadavg)
log "building $kube_version's e2e.test, ginkgo $ginkgo_version, agnhost into $tmp with $("$go" env GOVERSION) (load average $load on $(nproc) cores)"

# --- modules ---------------------------------------------------------------
t=$(date +%s)
k8s_info=$(cd "$work" && "$go" mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p')
k8s_dir=$(cd "$work" && "$go" mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
staging=$(sed -n 's#^[[:space:]]*\(replace[[:space:]]\{1,\}\)\{0,1\}\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\2#p' "$k8s_mod" |
  grep -v -x -e k8s.io/sample-cli-plugin -e k8s.io/sample-controller || true)
[[ -n $staging ]] || { log "found no staging replaces in k8s.io/kubernetes@$kube_version's go.mod"; exit 1; }
staging_version=v0.${kube_version#v1.}
k8s_go=$(sed -n 's/^go \([0-9][0-9.]*\)[[:space:]]*$/\1/p' "$k8s_mod")
release_time=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$k8s_info" | sed 's/\.[0-9]*Z$/Z/')
kube_minor=${kube_version#v1.}
kube_minor=${kube_minor%%.*}
mkdir -p "$work/kube"
{
  echo "module capn.local/e2ebuild"
  echo
  echo "go ${k8s_go:-1.26.0}"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $kube_version"
  echo "	github.com/onsi/ginkgo/v2 $ginkgo_version"
  echo ")"
  echo
  echo "replace ("
  for m in $staging; do
    echo "	$m => $m $staging_version"
  done
  echo ")"
} >"$work/kube/go.mod"
# Loading every package (the e2e tests' too) fetches what the builds need
# and writes go.sum.
gorun -C "$work/kube" list -test -deps k8s.io/kubernetes/test/e2e k8s.io/kubernetes/test/images/agnhost github.com/onsi/ginkgo/v2/ginkgo >/dev/null
note "$(printf '%-24s %5ss  %s' modules "$(since "$t")" "download and resolve ($(wc -w <<<"$staging") staging modules at $staging_version)")"

# --- binaries --------------------------------------------------------------
stamp=()
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=("-X $p.gitVersion=$kube_version" "-X $p.gitMajor=1" "-X $p.gitMinor=$kube_minor"
    "-X $p.gitCommit=" "-X $p.gitTreeState=clean" "-X $p.buildDate=${release_time:-1970-01-01T00:00:00Z}")
done
t=$(date +%s)
gorun -C "$work/kube" test -c -trimpath -ldflags "all=${stamp[*]} -s -w" -o "$tmp/bin/e2e.test" k8s.io/kubernetes/test/e2e
note "$(printf '%-24s %5ss  %s' e2e.test "$(since "$t")" "go test -c k8s.io/kubernetes/test/e2e")"
t=$(date +%s)
gorun -C "$work/kube" build -trimpath -ldflags "-s -w" -o "$tmp/bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
note "$(printf '%-24s %5ss  %s' ginkgo "$(since "$t")" "github.com/onsi/ginkgo/v2/ginkgo $ginkgo_version")"
t=$(date +%s)
gorun -C "$work/kube" build -trimpath -ldflags "${stamp[*]} -s -w" -o "$tmp/bin/agnhost" k8s.io/kubernetes/test/images/agnhost
note "$(printf '%-24s %5ss  %s' agnhost "$(since "$t")" "k8s.io/kubernetes/test/images/agnhost $(cat "$k8s_dir/test/images/agnhost/VERSION")")"
t=$(date +%s)
(cd "$repo" && GOFLAGS=-buildvcs=false gorun build -trimpath -o "$work/capn-node" ./cmd/capn-node)
note "$(printf '%-24s %5ss  %s' capn-node "$(since "$t")" "./cmd/capn-node (writes the images)")"

# --- images ----------------------------------------------------------------
# The references e2e.test runs: its own list (e2e.test --list-images prints
# every image of the manifest, with the registries it would use).
mapfile -t refs < <("$tmp/bin/e2e.test" --list-images)
# manifest <ImageID>: "<name>:<tag>" of an image of the manifest
# (test/utils/image/manifest.go: configs[BusyBox] = Config{<registry>,
# "busybox", "1.37.0-2"}); the list's order is a map's.
manifest() {
  local m
  m=$(sed -n 's/^[[:space:]]*configs\['"$1"'\] = Config{list\.[A-Za-z0-9]*, "\([^"]*\)", "\([^"]*\)"}.*/\1:\2/p' "$k8s_dir/test/utils/image/manifest.go")
  [[ -n $m ]] || { log "test/utils/image/manifest.go of $kube_version has no configs[$1]"; return 1; }
  echo "$m"
}
ref_of() { # ref_of <ImageID>: the reference e2e.test runs it under
  local m r
  m=$(manifest "$1") || return 1
  for r in "${refs[@]}"; do
    case $r in */"$m") echo "$r"; return 0 ;; esac
  done
  log "e2e.test $kube_version lists no $m image: ${refs[*]}"
  return 1
}
agnhost_ref=$(ref_of Agnhost)
if [[ ${agnhost_ref##*:} != "$(cat "$k8s_dir/test/images/agnhost/VERSION")" ]]; then
  log "e2e.test runs $agnhost_ref, but test/images/agnhost is version $(cat "$k8s_dir/test/images/agnhost/VERSION")"
  exit 1
fi
t=$(date +%s)
image() { # image <reference> <capn-node image flags...>
  local ref=$1 t out
  shift
  t=$(date +%s)
  out=$(echo "${ref#*/}" | tr '/:' '__').tar
  "$work/capn-node" image --ref "$ref" --out "$tmp/images/$out" "$@"
  echo "$ref images/$out" >>"$tmp/images.txt.tmp"
  info+=("$(printf '%-56s %4ss %7.1f MiB' "$ref" "$(since "$t")" "$(du -k "$tmp/images/$out" | awk '{print $1/1024}')")")
}
# busybox's applets, as links to /bin/busybox, but sh: that is Debian's
# bash, for two reasons measured on the specs. Debian's busybox-static is
# built to prefer its applets (FEATURE_SH_STANDALONE), so its sh runs its
# own nc, which lacks the -v -t -u the Services specs pass, whatever PATH
# says; and its ash (1.35) drops environment variables whose names are no
# shell identifiers ("data-1"), which the ConfigMap and Secret specs
# "consumable as environment variable names" check the container gets.
applets=$("$busybox" --list)
bb=(--file "bin/busybox=$busybox" --file "bin/bash=$bash" --link bin/sh=bash)
for a in $applets; do
  [[ $a == busybox || $a == sh || $a == bash ]] || bb+=(--link "bin/$a=busybox")
done
bash_libs=$(ldd "$bash" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
for l in $bash_libs; do
  bb+=(--file "${l#/}=$l")
done
path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
image "$(ref_of BusyBox)" "${bb[@]}" --dir tmp=1777 --env "$path" --cmd sh
# agnhost: what the specs run in it besides agnhost, from Debian, with
# every library ldd names (the loader too) at the path ldd prints; in
# /usr/bin, ahead of busybox's /bin on PATH.
tools=()
for t in "${agnhost_tools[@]}"; do
  tools+=(--file "usr/bin/${t%%=*}=${t#*=}")
done
libs=$(for t in "${agnhost_tools[@]}"; do ldd "${t#*=}"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  { grep -v -x -F -f <(echo "$bash_libs") || true; })
for l in $libs; do
  tools+=(--file "${l#/}=$l")
done
image "$(ref_of GlibcDnsTesting)" "${bb[@]}" "${tools[@]}" --dir tmp=1777 --env "$path" --cmd sh
porter=$k8s_dir/test/images/agnhost/porter
image "$agnhost_ref" "${bb[@]}" "${tools[@]}" --file "agnhost=$tmp/bin/agnhost" --link agnhost-2=agnhost \
  --file "localhost.crt=$porter/localhost.crt" --file "localhost.key=$porter/localhost.key" \
  --dir uploads=0755 --dir tmp=1777 --env "$path" --entrypoint /agnhost --cmd pause
mv "$tmp/images.txt.tmp" "$tmp/images.txt"

{
  echo "kubernetes $kube_version conformance tests (staging modules $staging_version), ginkgo $ginkgo_version, by hack/e2e.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) with $("$go" env GOVERSION)"
  echo "CGO_ENABLED=0, -trimpath, no build tags, -ldflags '-s -w' and the version stamps; load average at start $load, at end $(cut -d' ' -f1-3 /proc/loadavg), on $(nproc) cores"
  echo "images FROM scratch (capn-node image): busybox $busybox_version ($busybox) with $bash as sh, agnhost with busybox and ${agnhost_tools[*]} and their libraries ($(echo $libs))"
  echo "not built: $(printf '%s\n' "${refs[@]}" | { grep -v -x -F -f <(cut -d' ' -f1 "$tmp/images.txt") || true; } | tr '\n' ' ')(pause and etcd: hack/nodeimages.sh)"
  echo
  printf '%s\n' "${info[@]}"
  printf 'total %ss\n' "$(since "$start")"
  echo
  (cd "$tmp/bin" && ls -l | awk 'NR > 1 {printf "%-24s %6.1f MiB\n", $NF, $5/1048576}')
} >"$tmp/BUILD-INFO"
rm -rf "$dir"
mv "$tmp" "$dir"
log "built in $(since "$start")s: $dir"
echo "$dir"
