package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// WatchOptions select what Watch streams.
type WatchOptions struct {
	// Cluster limits the stream to one cluster and its machines.
	Cluster string
	// Kind limits it to api.KindCluster or api.KindMachine.
	Kind string
	// ResumeFrom is the ID of the last event already seen (from an earlier
	// Watch), to get only what came after it.
	ResumeFrom string
}

// WatchEvent is one event of Watch.
type WatchEvent struct {
	// Type is api.WatchAdded, WatchModified, WatchDeleted, WatchSynced (the
	// state so far was sent; what follows is live) or WatchReset (drop what
	// you hold: the current state follows as ADDED). Bookmarks are not
	// passed on.
	Type string
	// ID is the cursor to resume from (WatchOptions.ResumeFrom).
	ID string
	// Cluster or Machine is the object of ADDED, MODIFIED and DELETED.
	Cluster *capnv1.Cluster
	Machine *capnv1.Machine
}

// Watch streams changes to clusters and machines to fn until ctx ends
// (returning ctx.Err()) or fn returns an error (returned as it is). A
// dropped connection is reconnected with the last event's ID, so nothing
// is missed: the gateway sends what came after it, or RESET and the whole
// state when it no longer can. A refused request (401, 403, 400) ends the
// watch with its *Error.
func (c *Client) Watch(ctx context.Context, opts WatchOptions, fn func(WatchEvent) error) error {
	q := url.Values{}
	if opts.Cluster != "" {
		q.Set("cluster", opts.Cluster)
	}
	if opts.Kind != "" {
		q.Set("kind", opts.Kind)
	}
	return c.stream(ctx, "/v1/watch", q, opts.ResumeFrom, func(ev sseEvent) error {
		if ev.event == api.WatchBookmark {
			return nil
		}
		var we api.WatchEvent
		if err := json.Unmarshal(ev.data, &we); err != nil {
			return fmt.Errorf("watch: event %s: %w", ev.id, err)
		}
		out := WatchEvent{Type: we.Type, ID: ev.id}
		switch we.Kind {
		case api.KindCluster:
			out.Cluster = new(capnv1.Cluster)
			if err := unmarshal.Unmarshal(we.Object, out.Cluster); err != nil {
				return fmt.Errorf("watch: event %s: %w", ev.id, err)
			}
		case api.KindMachine:
			out.Machine = new(capnv1.Machine)
			if err := unmarshal.Unmarshal(we.Object, out.Machine); err != nil {
				return fmt.Errorf("watch: event %s: %w", ev.id, err)
			}
		}
		return fn(out)
	})
}

// FollowEvents streams a cluster's timeline to fn: the stored events (as
// Events would return them), then synced is called once, then new events
// as they are stored, until ctx ends (returning ctx.Err()) or fn returns an
// error. It reconnects after the last event seen.
func (c *Client) FollowEvents(ctx context.Context, cluster string, opts EventsOptions, fn func(ev api.TimelineEvent) error, synced func() error) error {
	q := opts.query()
	q.Set("follow", "true")
	return c.stream(ctx, "/v1/clusters/"+url.PathEscape(cluster)+"/events", q, "", func(ev sseEvent) error {
		switch ev.event {
		case api.TimelineSynced:
			if synced != nil {
				return synced()
			}
			return nil
		case api.TimelineEventName:
			var te api.TimelineEvent
			if err := json.Unmarshal(ev.data, &te); err != nil {
				return fmt.Errorf("events: %s: %w", ev.id, err)
			}
			return fn(te)
		}
		return nil
	})
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event string
	data      []byte
}

// callbackError marks an error returned by the caller's function, which
// ends a stream instead of reconnecting it.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// stream reads an SSE endpoint, reconnecting (with backoff, from the last
// event id) when the connection ends, until ctx ends or fn fails.
func (c *Client) stream(ctx context.Context, path string, q url.Values, lastID string, fn func(sseEvent) error) error {
	const minWait, maxWait = 250 * time.Millisecond, 5 * time.Second
	wait := minWait
	for {
		resp, err := c.send(ctx, http.MethodGet, path, q, nil, "", api.MediaEventStream, lastID)
		if err == nil {
			err = readSSE(resp.Body, func(ev sseEvent) error {
				wait = minWait // the stream works: reconnect quickly next time
				if ev.id != "" {
					lastID = ev.id
				}
				if err := fn(ev); err != nil {
					return callbackError{err}
				}
				return nil
			})
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var cbe callbackError
		if errors.As(err, &cbe) {
			return cbe.err
		}
		if code := StatusCode(err); code != 0 && code < 500 && code != http.StatusTooManyRequests {
			return err
		}
		var e *Error
		if errors.As(err, &e) && e.RetryAfter > wait {
			wait = e.RetryAfter
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// readSSE parses an event stream (https://html.spec.whatwg.org/multipage/server-sent-events.html)
// and calls fn for each event; comments and retry hints are skipped. It
// returns fn's error, or the read error (io.EOF when the server closed).
func readSSE(r io.Reader, fn func(sseEvent) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var ev sseEvent
	var data bytes.Buffer
	hasData := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if hasData {
				ev.data = bytes.Clone(data.Bytes())
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, hasData = sseEvent{}, false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.id = value
		case "event":
			ev.event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		}
	}
}
