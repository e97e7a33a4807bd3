// Package docker is the docker infrastructure provider: a machine is a
// container of the capn-node image (built locally FROM scratch by `make
// images`, never pulled) on a bridge network of its cluster, with a static
// address, labelled capn.dev/{provider,deployment,cluster,machine}. No
// kubelet runs: capn-node fetches and checks its bootstrap data and
// heartbeats. Machines reach capn's NATS through a relay socket the
// provider serves (see README.md for why).
//
// The daemon is the provider's whole memory: Describe and List inspect
// containers every time, so a restarted provider has its machines back.
// Docker's event stream and the SDK's periodic List turn containers
// removed or stopped behind capn's back into drift (Gone, Stopped).
package docker
