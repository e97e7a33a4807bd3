package gateway

import (
	"bytes"
	"net/http"
	"time"

	"github.com/capn-dev/capn/gateway/api"
)

// sseWriteTimeout bounds one write to a stream: a client that stops
// reading is dropped (it resumes with Last-Event-ID).
const sseWriteTimeout = 30 * time.Second

// sseStream writes Server-Sent Events. Not safe for concurrent use: one
// handler goroutine writes.
type sseStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE sends the stream's headers and a retry hint. The server's read
// and write deadlines are lifted: a stream lives as long as its client.
func startSSE(w http.ResponseWriter) (*sseStream, error) {
	h := w.Header()
	h.Set("Content-Type", api.MediaEventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // tell proxies not to buffer
	s := &sseStream{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.SetReadDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	return s, s.write([]byte("retry: 2000\n\n"))
}

// send writes one event. data is split on newlines into data: lines, as
// the format requires (JSON from this package has none).
func (s *sseStream) send(id, event string, data []byte) error {
	var b bytes.Buffer
	if id != "" {
		b.WriteString("id: ")
		b.WriteString(id)
		b.WriteByte('\n')
	}
	if event != "" {
		b.WriteString("event: ")
		b.WriteString(event)
		b.WriteByte('\n')
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return s.write(b.Bytes())
}

// comment writes a comment line, which clients ignore: the heartbeat that
// keeps proxies from closing an idle stream.
func (s *sseStream) comment(text string) error {
	return s.write([]byte(": " + text + "\n\n"))
}

func (s *sseStream) write(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}
