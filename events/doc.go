// Package events is capn's one piece of messaging plumbing: CloudEvents over
// NATS JetStream, shared by every service and provider.
//
//   - codec.go: the CloudEvents NATS binding (binary mode with percent-encoded
//     ce- headers; structured mode accepted on read), built on sdk-go's
//     event and binding packages.
//   - publish.go: publishing with the event id as Nats-Msg-Id, so JetStream
//     drops a repeated publish of the same event.
//   - consume.go: the loop over a durable pull consumer: set up (retried),
//     fetch, run the handler inside its middlewares, then settle: it acks,
//     naks with backoff or terminates — never the handler. Each piece is a
//     file of its own, as watermill's router middlewares are:
//     consume_spec.go (the durable's declaration), consume_handler.go
//     (Handler, Typed, middleware), consume_log.go (decoding and the
//     logger a handler gets), consume_recover.go (panics), consume_keepalive.go
//     (InProgress while a handler runs), consume_metrics.go, consume_retry.go
//     (nak with backoff) and consume_terminate.go (Permanent, poison and
//     dead-lettered messages).
//   - topology.go: the streams, buckets and consumers capn declares, and
//     their idempotent provisioning.
//
// sdk-go's own protocol/nats_jetstream binding is deliberately not used: it
// acks a message before the handler's result is known, so a crash loses it.
package events
