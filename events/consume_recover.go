package events

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// ErrPanic wraps a panic recovered from a handler.
var ErrPanic = errors.New("handler panicked")

// recoverPanics turns a handler's panic into an error wrapping ErrPanic
// (retried like any error), logs it with its stack and tells panicked.
func recoverPanics(panicked func()) middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) (err error) {
			defer func() {
				if r := recover(); r != nil {
					panicked()
					zerolog.Ctx(ctx).Error().Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).Msg("handler panicked")
					err = fmt.Errorf("%w: %v", ErrPanic, r)
				}
			}()
			return next(ctx, m)
		}
	}
}
