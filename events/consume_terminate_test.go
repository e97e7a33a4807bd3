package events

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestPermanentAndExhausted(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", Permanent(nil), false},
		{"plain", context.DeadlineExceeded, false},
		{"permanent", Permanent(context.DeadlineExceeded), true},
		{"wrapped permanent", fmt.Errorf("create: %w", Permanent(errors.New("bad"))), true},
		{"malformed", fmt.Errorf("decode: %w", ErrMalformed), true},
		{"panic", fmt.Errorf("%w: boom", ErrPanic), false},
	}
	for _, tt := range tests {
		if got := IsPermanent(tt.err); got != tt.want {
			t.Errorf("%s: IsPermanent(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
	if err := Permanent(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("Permanent hides its cause: %v", err)
	}
	for d, want := range map[uint64]bool{1: false, 2: false, 3: true, 4: true} {
		if got := exhausted(d, 3); got != want {
			t.Errorf("exhausted(%d, 3) = %v, want %v", d, got, want)
		}
	}
}
