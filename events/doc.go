// Package events is capn's one piece of messaging plumbing: CloudEvents over
// NATS JetStream, shared by every service and provider.
//
//   - codec.go: the CloudEvents NATS binding (binary mode with percent-encoded
//     ce- headers; structured mode accepted on read), built on sdk-go's
//     event and binding packages.
//   - publish.go: publishing with the event id as Nats-Msg-Id, so JetStream
//     drops a repeated publish of the same event.
//   - consume.go: durable pull consumers with typed handlers; the loop acks,
//     naks with backoff or terminates — never the handler.
//   - topology.go: the streams, buckets and consumers capn declares, and
//     their idempotent provisioning.
//
// sdk-go's own protocol/nats_jetstream binding is deliberately not used: it
// acks a message before the handler's result is known, so a crash loses it.
package events
