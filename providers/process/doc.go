// Package process is the process infrastructure provider: a machine is a
// real OS process of the node agent capn-node (cmd/capn-node) on this
// host, with its own data directory and its own 127.a.b.x address. No
// kubelet runs: capn-node fetches and checks the machine's bootstrap data,
// writes its files under the machine's data dir and heartbeats; given
// Options.KubeBin, it runs the Kubernetes components its bootstrap data
// asks for. A cluster's control-plane endpoint is a capn-node endpoint
// process: a TCP load balancer to the control-plane machines' API servers,
// answering as a placeholder while none is up.
//
// The state directory is the provider's whole memory (see README.md):
// Describe and List read it and /proc each time, so machines outlive the
// provider and a restarted one has them back at once. A machine's process
// that exits without a stop (a crash, kill -9) is drift: the SDK reports
// it Gone and capn replaces the machine.
package process
