// Package keys names every KV key and every NATS subject capn builds, in
// one place: typed constructors, the prefixes caches and watchers filter
// on, and Parse / ParseSubject, which read a key or subject back and
// refuse one of the wrong shape.
//
// Keys and subjects are dot-separated tokens; a cluster, machine, pool or
// provider name is one token (no '.', '*', '>' or space), and a
// cluster-level object is "_" (ClusterObject). The package imports the
// standard library only, so providers and the schemas can use it.
package keys
