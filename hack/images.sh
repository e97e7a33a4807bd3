#!/usr/bin/env bash
# Builds capn's container images locally, FROM scratch, with no registry:
# every program is built on this host as a static binary (CGO_ENABLED=0,
# -trimpath) and copied into an image by deploy/images/Dockerfile; so is
# nats-server, from the nats-server/v2 module pinned in go.mod. capn-node
# (the docker provider's machine image) uses deploy/images/capn-node.Dockerfile,
# with Debian's busybox-static as its shell (CAPN_BUSYBOX, default /bin/busybox).
#
# Images are named capn-<program> (a program already called capn-* keeps its
# name) and tagged $CAPN_IMAGE_TAG (default latest). An image is rebuilt only
# when its content changes: each carries the label dev.capn.content, the
# sha256 of its binary and Dockerfile, and a build whose content matches the
# existing image's is skipped. Go's build cache makes the binaries cheap.
#
#   hack/images.sh                 every image docker-compose.yaml needs
#   hack/images.sh gateway nats-server   only these
#
# Environment: CAPN_IMAGE_TAG (latest), CAPN_IMAGES_DIR (build contexts,
# default deploy/.images), GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tag=${CAPN_IMAGE_TAG:-latest}
out=${CAPN_IMAGES_DIR:-$root/deploy/.images}
go=${GO:-go}
dockerfile=$root/deploy/images/Dockerfile
nodefile=$root/deploy/images/capn-node.Dockerfile

default=(nats-server capn-nats-config cluster-planner machine-manager bootstrapper health-watcher remediator addon-manager fleet-manager
  autoscaler-provider gateway backup maintenance controlplane-external controlplane-hosted capn-provider-sim capn-provider-docker capn-node)
programs=("$@")
[ ${#programs[@]} -gt 0 ] || programs=("${default[@]}")

image_of() { case $1 in capn-*) echo "$1:$tag" ;; *) echo "capn-$1:$tag" ;; esac; }

command -v docker >/dev/null || { echo "images: docker is not installed" >&2; exit 1; }
# capn-node's shell (deploy/images/capn-node.Dockerfile): Debian's static busybox.
busybox=${CAPN_BUSYBOX:-/bin/busybox}
for p in "${programs[@]}"; do
  if [ "$p" = capn-node ] && ! [ -x "$busybox" ]; then
    echo "images: capn-node needs a static busybox at $busybox (apt-get install busybox-static, or set CAPN_BUSYBOX)" >&2; exit 1
  fi
done
docker info >/dev/null 2>&1 || { echo "images: the Docker daemon is not reachable" >&2; exit 1; }

# Binaries: the programs that exist (another may not be written yet), one go
# build for all of them.
mkdir -p "$out/bin"
pkgs=() built=()
for p in "${programs[@]}"; do
  case $p in
    nats-server) ;;
    *) if [ -d "cmd/$p" ]; then pkgs+=("./cmd/$p"); else echo "images: skipping $p: cmd/$p does not exist" >&2; continue; fi ;;
  esac
  built+=("$p")
done
start=$(date +%s)
export CGO_ENABLED=0
if [ ${#pkgs[@]} -gt 0 ]; then
  "$go" build -trimpath -ldflags='-s -w' -o "$out/bin/" "${pkgs[@]}"
fi
for p in "${built[@]}"; do
  if [ "$p" = nats-server ]; then
    # The module's own main package, at the version go.mod pins.
    "$go" build -trimpath -ldflags='-s -w' -o "$out/bin/nats-server" github.com/nats-io/nats-server/v2
  fi
done
echo "images: binaries built in $(( $(date +%s) - start ))s"

for p in "${built[@]}"; do
  img=$(image_of "$p")
  file=$dockerfile
  [ "$p" = capn-node ] && [ -f "$nodefile" ] && file=$nodefile
  extra=()
  [ "$file" = "$nodefile" ] && extra=("$busybox")
  content=$(cat "$out/bin/$p" "$file" "${extra[@]}" | sha256sum | cut -c1-64)
  have=$(docker image inspect "$img" --format '{{ index .Config.Labels "dev.capn.content" }}' 2>/dev/null || true)
  if [ "$have" = "$content" ]; then
    echo "images: $img is up to date"
    continue
  fi
  ctx=$out/ctx/$p
  rm -rf "$ctx"
  if [ "$file" = "$nodefile" ]; then
    mkdir -p "$ctx"
    ln "$out/bin/$p" "$ctx/capn-node" 2>/dev/null || cp "$out/bin/$p" "$ctx/capn-node"
    cp "$busybox" "$ctx/busybox"
  else
    mkdir -p "$ctx/rootfs/tmp" "$ctx/rootfs/data"
    chmod 1777 "$ctx/rootfs/tmp" "$ctx/rootfs/data"
    ln "$out/bin/$p" "$ctx/rootfs/program" 2>/dev/null || cp "$out/bin/$p" "$ctx/rootfs/program"
  fi
  docker build --quiet --file "$file" --build-arg PROGRAM="$p" --label dev.capn.content="$content" \
    --tag "$img" "$ctx" >/dev/null 2> >(grep -v -e DEPRECATED -e 'legacy builder' -e 'buildx' -e '^ *$' -e 'docs.docker.com' >&2 || true)
  echo "images: built $img"
done
echo "images: done in $(( $(date +%s) - start ))s"
