// Package daemon is what every capn program shares around its own logic:
// configuration from flags and CAPN_* environment variables, zerolog
// logging, a NATS connection that survives server restarts, the
// /healthz /readyz /metrics endpoints, and a graceful shutdown.
//
// A standalone service is one line of main:
//
//	func main() { daemon.Main(planner.New()) }
//
// Main parses flags (flag > env > default), validates every setting and
// prints all problems at once (exit 2), and calls Run until SIGINT or
// SIGTERM. Run connects, provisions capn's streams and buckets
// (idempotent), serves the ops endpoints and calls Service.Run with its
// Deps: logger, connection, JetStream, metrics registry and readiness.
// `capn dev` calls Run for every service in one process with
// WithInProcess, WithOps and WithRegistry, so each service keeps its own
// connection while sharing one ops endpoint and one registry.
//
// Files: config.go and flags.go (settings and their validation), log.go,
// nats.go (Connect), ops.go and opsserver.go (health and metrics over
// HTTP), metrics.go, run.go (Run and its options), main.go (Main), and
// service.go (the Service contract and Deps).
package daemon
