package events

import (
	"context"
	"slices"
	"testing"
)

func TestWrapRunsTheFirstMiddlewareOutermost(t *testing.T) {
	var order []string
	mw := func(name string) middleware {
		return func(next Handler) Handler {
			return func(ctx context.Context, m *Message) error {
				order = append(order, name+">")
				err := next(ctx, m)
				order = append(order, "<"+name)
				return err
			}
		}
	}
	h := wrap(func(context.Context, *Message) error { order = append(order, "handler"); return nil }, mw("a"), mw("b"))
	if err := h(context.Background(), &Message{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a>", "b>", "handler", "<b", "<a"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}
