// Package topology renders class clusters: a ClusterClass revision and a
// cluster's spec.topology (class, revision, variables, pools) give the
// cluster's spec, deterministically. It also validates a class (every
// variable, default and path) and hashes a class spec into its revision
// record. Pure: no I/O, no clocks.
//
// The patch language is one JSON-pointer-like path per target, with the
// manifest's field names, into the rendered ClusterSpec:
//
//	/kubernetesVersion                     a scalar field
//	/controlPlane/replicas                 a scalar of a nested message
//	/controlPlane/template/parameters/size a key of a map of strings
//	/workerPools/*/replicas                every pool
//	/workerPools/md-0/labels/tier          the pool named md-0 (skipped
//	                                       when the cluster has none)
//
// A variable's value (the cluster's, else its default) is written to each
// of its paths, after the pools are rendered; a path must end at a field of
// the variable's type (string: a string field or a map key; integer: an
// integer field; boolean: a bool field). See README.md.
package topology
