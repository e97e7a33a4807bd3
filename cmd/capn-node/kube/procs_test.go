package kube_test

import (
	"testing"

	"github.com/capn-dev/capn/internal/testkit"
)

// The /proc helpers are testkit's (shared with internal/supervise).
type proc = testkit.Proc

func processes(t testing.TB) []proc { return testkit.Processes(t) }

func requireLinux(t *testing.T) { testkit.RequireLinux(t) }
