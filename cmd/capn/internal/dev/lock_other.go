//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package dev

// lockDataDir does not lock on this platform: nothing keeps a second
// capn dev from the same data directory but nats-server's own store lock.
func lockDataDir(string) (func(), error) { return func() {}, nil }
