// Package manifest reads, writes, defaults and validates capn's Kubernetes-style
// manifests (apiVersion capn.dev/v1alpha1, kind Cluster).
//
// The flow at the edge (gateway, CLI) is:
//
//	c, err := manifest.Decode(data)      // YAML or JSON; unknown fields are errors with their path
//	manifest.Default(c)                  // fill what the user left out
//	err = manifest.Validate(c)           // every bad field at once, errors.Join of *FieldError
//	err = manifest.ValidateUpdate(old, c) // apply-time rules: upgrades, immutable fields
//
// or, where the cluster is handed on, defaulted and validated once:
//
//	k := validator.Check(c)              // Default and Validate, in place; k.Err() is the verdict
//	err = k.ValidateUpdate(old)          // the verdict and the update rules, nothing checked twice
//
// Field names are protojson's lowerCamelCase (kubernetesVersion, workerPools,
// maxSurge); the proto names (kubernetes_version) are accepted too. Durations
// may be written as Go durations ("15m") or as protojson wants them ("900s").
//
// The package is pure: no I/O, no clocks.
package manifest
