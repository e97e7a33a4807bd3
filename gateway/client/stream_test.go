package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/gateway/api"
)

func TestReadSSE(t *testing.T) {
	in := "retry: 2000\r\n\r\n: heartbeat\n\nid: 1-2\nevent: ADDED\ndata: {\"a\":\ndata: 1}\n\n" +
		"data:no-space\n\nid: 3-4\n\n" // an id without data dispatches nothing
	var got []string
	err := readSSE(strings.NewReader(in), func(ev sseEvent) error {
		got = append(got, fmt.Sprintf("%s|%s|%s", ev.id, ev.event, ev.data))
		return nil
	})
	if !errors.Is(err, io.EOF) {
		t.Fatalf("err %v", err)
	}
	want := "1-2|ADDED|{\"a\":\n1},||no-space"
	if strings.Join(got, ",") != want {
		t.Errorf("events %q, want %q", strings.Join(got, ","), want)
	}
}

// TestWatchResumes: when the stream breaks, Watch reconnects with the last
// event's id as Last-Event-ID and goes on.
func TestWatchResumes(t *testing.T) {
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.Header().Set("Content-Type", api.MediaProblem)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type":"urn:capn:problem:unauthorized","title":"Unauthorized","status":401}`)
			return
		}
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(lastIDs)
		mu.Unlock()
		w.Header().Set("Content-Type", api.MediaEventStream)
		if n == 1 {
			fmt.Fprint(w, "id: 5-5\nevent: SYNCED\ndata: {\"type\":\"SYNCED\"}\n\n")
			return // the connection drops
		}
		fmt.Fprint(w, "id: 6-5\nevent: DELETED\ndata: {\"type\":\"DELETED\",\"kind\":\"Cluster\",\"object\":{\"metadata\":{\"name\":\"x\"}}}\n\n")
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := errors.New("done")
	var types []string
	err = c.Watch(ctx, WatchOptions{}, func(ev WatchEvent) error {
		types = append(types, ev.Type)
		if ev.Type == api.WatchDeleted {
			if ev.Cluster.GetMetadata().GetName() != "x" || ev.ID != "6-5" {
				t.Errorf("event %+v", ev)
			}
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("Watch: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(types, ",") != "SYNCED,DELETED" || len(lastIDs) != 2 || lastIDs[0] != "" || lastIDs[1] != "5-5" {
		t.Errorf("types %v, Last-Event-IDs %q", types, lastIDs)
	}

	bad, _ := New(srv.URL, WithToken("nope"))
	var e *Error
	if err := bad.Watch(ctx, WatchOptions{}, func(WatchEvent) error { return nil }); !errors.As(err, &e) || e.StatusCode != 401 || e.Problem.Type != api.ProblemUnauthorized {
		t.Errorf("refused watch: %v", err)
	}
}
