package events

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestRecoverPanicsTurnsAPanicIntoARetriableError(t *testing.T) {
	tests := []struct {
		name       string
		h          Handler
		wantPanics int
		wantErr    error
	}{
		{"returns", func(context.Context, *Message) error { return nil }, 0, nil},
		{"fails", func(context.Context, *Message) error { return context.Canceled }, 0, context.Canceled},
		{"panics", func(context.Context, *Message) error { panic("boom") }, 1, ErrPanic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx := zerolog.New(&logs).WithContext(context.Background())
			panics := 0
			err := recoverPanics(func() { panics++ })(tt.h)(ctx, &Message{})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if panics != tt.wantPanics {
				t.Fatalf("told of %d panics, want %d", panics, tt.wantPanics)
			}
			if IsPermanent(err) {
				t.Fatalf("%v is permanent; a panic is retried", err)
			}
			if logged := strings.Contains(logs.String(), `"stack"`); logged != (tt.wantPanics > 0) {
				t.Fatalf("stack logged %v, want %v: %s", logged, tt.wantPanics > 0, logs.String())
			}
		})
	}
}
