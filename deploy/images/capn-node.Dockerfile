# capn-node: the node agent of docker machines (providers/docker). It runs no
# kubelet: it fetches and checks its bootstrap data, writes its files under
# /var/lib/capn-node/rootfs and heartbeats. The same binary serves a cluster's
# placeholder control-plane endpoint (capn-node endpoint).
#
# FROM scratch: there is no registry to pull a base image from. The build
# context is a directory holding only the static binary `capn-node`
# (CGO_ENABLED=0); `make images` builds it and tags capn-node:latest:
#   CGO_ENABLED=0 go build -trimpath -o <ctx>/capn-node ./cmd/capn-node
#   docker build -f deploy/images/capn-node.Dockerfile -t capn-node:latest <ctx>
FROM scratch
COPY capn-node /capn-node
ENTRYPOINT ["/capn-node"]
CMD ["agent"]
