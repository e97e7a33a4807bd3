// Package e2e runs capn's services end to end: each as its own daemon.Run
// with its own NATS connection to one real embedded nats-server, exactly as
// separate programs would, talking only through NATS (tests/internal/harness).
package e2e

import (
	"testing"

	"github.com/capn-dev/capn/tests/internal/harness"
)

// world is one capn deployment on one embedded server.
type world struct {
	*harness.System
	t *testing.T
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	return &world{System: harness.New(t, harness.Options{}), t: t}
}

// startAll starts the core services (no health loop).
func (w *world) startAll() { w.StartAll(harness.Core...) }
