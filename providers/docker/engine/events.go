package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Event is one entry of the daemon's event stream.
type Event struct {
	Type   string `json:"Type"`   // container, network, image, ...
	Action string `json:"Action"` // start, die, stop, kill, destroy, ...
	Actor  struct {
		ID         string            `json:"ID"`
		Attributes map[string]string `json:"Attributes"` // labels, name, exitCode
	} `json:"Actor"`
	TimeNano int64 `json:"timeNano"`
}

// Events streams the daemon's container events for containers with all
// labels to fn, until ctx ends (nil) or the stream breaks (the error).
// ready, when not nil, is called once the stream is open: events from
// then on are delivered.
func (c *Client) Events(ctx context.Context, labels map[string]string, ready func(), fn func(Event)) error {
	q := labelFilters(labels, map[string][]string{"type": {"container"}})
	// The stream lives as long as ctx: no call timeout, but opening it
	// must not hang.
	openCtx, cancelOpen := context.WithCancel(ctx)
	defer cancelOpen()
	opened := make(chan struct{})
	go func() {
		select {
		case <-opened:
		case <-ctx.Done():
		case <-timeAfter(c.Timeout):
			cancelOpen()
		}
	}()
	resp, err := c.sendNoTimeout(openCtx, http.MethodGet, "/events", q, nil, "")
	close(opened)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if ready != nil {
		ready()
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var e Event
		if err := dec.Decode(&e); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("docker: event stream closed by the daemon")
			}
			return fmt.Errorf("docker: event stream: %w", err)
		}
		fn(e)
	}
}

// timeAfter is time.After, or a channel that never fires for d <= 0.
func timeAfter(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return time.After(d)
}
