# capn-node: the node agent of docker machines (providers/docker). It runs no
# kubelet: it fetches and checks its bootstrap data, writes its files under
# /var/lib/capn-node/rootfs, runs the bootstrap's preCommands and
# postCommands with /bin/sh, and heartbeats. The same binary serves a
# cluster's placeholder control-plane endpoint (capn-node endpoint).
#
# FROM scratch: there is no registry to pull a base image from. The build
# context is a directory holding two static binaries: `capn-node`
# (CGO_ENABLED=0) and `busybox`, Debian's busybox-static (/bin/busybox; about
# 2 MB): its applets (sh, cat, grep, test, …) become /bin, so that the
# commands a cluster's bootstrap declares run on docker machines as on
# process machines. `make images` builds it and tags capn-node:latest:
#   CGO_ENABLED=0 go build -trimpath -o <ctx>/capn-node ./cmd/capn-node
#   cp /bin/busybox <ctx>/busybox
#   docker build -f deploy/images/capn-node.Dockerfile -t capn-node:latest <ctx>
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY capn-node /capn-node
ENTRYPOINT ["/capn-node"]
CMD ["agent"]
