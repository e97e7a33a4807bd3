// Package gateway is capn's front door: the HTTP API the capn CLI and the
// dashboard use, CloudEvents ingest for external systems, and admin
// kubeconfigs. It is a daemon.Service ("gateway"); cmd/gateway runs it on
// its own and capn dev next to the other services. docs/api.md is the
// reference of the API; README.md draws the flow.
//
// The gateway is the single writer of desired clusters (desired bucket,
// key cluster.<name>): every write is a compare-and-set on the revision
// read, after the manifest rules (schemas/manifest) accepted the result.
// It reads machines and statuses, never writes them. Ingested events go to
// its own stream CAPN_INGEST, and capn's health types also to CAPN_HEALTH.
//
// Files by concern: service.go (Options, flags, Run), server.go (routes
// and middleware), auth.go and ratelimit.go, problem.go (RFC 9457 errors),
// body.go (reading manifests and JSON bodies), write.go (the CAS write of a
// cluster and its server-owned fields), clusters.go, actions.go (scale,
// upgrade, pause, resume), machines.go, kubeconfig.go, timeline.go,
// hub.go and watch.go (the watch stream), sse.go, ingest.go and
// ingest_decode.go, objects.go (what the API shows), metrics.go.
// The wire types are in gateway/api, the Go client in gateway/client.
package gateway
