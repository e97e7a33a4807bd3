package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestRetryOnConflict(t *testing.T) {
	conflictErr := conflict("update", "k", jetstream.ErrKeyRevisionMismatch)
	tests := []struct {
		name      string
		attempts  int
		errs      []error // fn returns errs[i] on call i, then nil
		wantCalls int
		wantErr   []error
	}{
		{name: "first try", attempts: 3, wantCalls: 1},
		{name: "conflicts then success", attempts: 3, errs: []error{conflictErr, conflictErr}, wantCalls: 3},
		{name: "raw revision mismatch is a conflict", attempts: 3, errs: []error{jetstream.ErrKeyRevisionMismatch}, wantCalls: 2},
		{name: "raw key exists is a conflict", attempts: 3, errs: []error{fmt.Errorf("create: %w", jetstream.ErrKeyExists)}, wantCalls: 2},
		{name: "other error stops", attempts: 3, errs: []error{conflictErr, errTest}, wantCalls: 2, wantErr: []error{errTest}},
		{
			name: "gives up", attempts: 3, errs: []error{conflictErr, conflictErr, conflictErr, conflictErr},
			wantCalls: 3, wantErr: []error{ErrConflict, jetstream.ErrKeyRevisionMismatch},
		},
		{
			name: "zero attempts means the default", attempts: 0,
			errs:      []error{conflictErr, conflictErr, conflictErr, conflictErr, conflictErr, conflictErr, conflictErr, conflictErr, conflictErr, conflictErr, conflictErr},
			wantCalls: DefaultAttempts, wantErr: []error{ErrConflict},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := RetryOnConflict(context.Background(), tt.attempts, func(context.Context) error {
				calls++
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			})
			if calls != tt.wantCalls {
				t.Errorf("calls %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr == nil && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not match %v", err, want)
				}
			}
		})
	}
}

func TestRetryOnConflictContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := RetryOnConflict(ctx, 100, func(context.Context) error {
		calls++
		cancel()
		return ErrConflict
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConflict) || calls != 1 {
		t.Fatalf("err %v after %d calls, want Canceled and ErrConflict after 1", err, calls)
	}
}

func TestBackoffBounds(t *testing.T) {
	for i := 1; i < 70; i++ {
		for range 20 {
			if d := backoff(i); d < 0 || d > backoffMax {
				t.Fatalf("backoff(%d) = %s", i, d)
			}
		}
	}
	if d := backoff(1); d > backoffBase {
		t.Fatalf("backoff(1) = %s, want <= %s", d, backoffBase)
	}
}
