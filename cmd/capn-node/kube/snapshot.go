package kube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// etcd snapshots through the JSON gateway every member serves on its
// client URLs: POST /v3/maintenance/snapshot answers with the snapshot as
// a stream of JSON objects, each {"result":{"remaining_bytes":…,"blob":
// base64}} (the gRPC server stream, one message a line), or {"error":…}.
// No etcd client module is needed.

// SnapshotInfo describes a snapshot Snapshot wrote.
type SnapshotInfo struct {
	// Size and SHA256 are of the bytes written.
	Size   int64
	SHA256 string
	// Revision is the member's revision when the snapshot began (the
	// status's header): every write up to it is in the snapshot.
	Revision int64
	// Members are the members when the snapshot began.
	Members []Member
}

// snapshotChunk is one message of the snapshot stream.
type snapshotChunk struct {
	Result *struct {
		RemainingBytes json.Number `json:"remaining_bytes"`
		Blob           []byte      `json:"blob"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"grpc_code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Revision is the revision of the member at e's first endpoint that
// answers.
func (e *Etcd) Revision(ctx context.Context) (int64, error) {
	var out struct {
		Header struct {
			Revision json.Number `json:"revision"`
		} `json:"header"`
	}
	if err := e.call(ctx, "/v3/maintenance/status", map[string]any{}, &out); err != nil {
		return 0, err
	}
	return out.Header.Revision.Int64()
}

// Snapshot streams a snapshot of the member at e's first endpoint to w
// (etcdctl snapshot save through the gateway). A stream that ends before
// its last chunk (remaining_bytes 0) is an error: w then holds a torn
// snapshot that must not be kept.
func (e *Etcd) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	members, err := e.Members(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd members: %w", err)
	}
	rev, err := e.Revision(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd revision: %w", err)
	}
	c := e.clients[0]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Server+"/v3/maintenance/snapshot", bytes.NewReader([]byte("{}")))
	if err != nil {
		return SnapshotInfo{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	// The client's timeout bounds a whole answer: a snapshot's stream is
	// bounded by ctx instead.
	hc := *c.HTTP
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd snapshot at %s: %w", c.Server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return SnapshotInfo{}, fmt.Errorf("etcd snapshot at %s: %s: %s", c.Server, resp.Status, bytes.TrimSpace(b))
	}
	info, err := readSnapshotStream(resp.Body, w)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd snapshot at %s: %w", c.Server, err)
	}
	info.Revision, info.Members = rev, members
	return info, nil
}

// readSnapshotStream copies the gateway's snapshot stream from r to w.
// etcd sends the database in chunks (remaining_bytes reaching 0 with the
// last one), then the database's sha256 as one more message; the stream
// then ends. The bytes written are what etcdctl snapshot save writes (the
// database and its hash, which etcdutl snapshot restore checks), and the
// hash is checked here too: a stream cut short or changed is an error.
func readSnapshotStream(r io.Reader, w io.Writer) (SnapshotInfo, error) {
	all, db := sha256.New(), sha256.New()
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	var size int64
	var pending []byte // the last message's blob: the hash, once the stream ends
	lastSeen := false
	for {
		var m snapshotChunk
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return SnapshotInfo{}, fmt.Errorf("read the stream after %d bytes: %w", size, err)
		}
		if m.Error != nil {
			return SnapshotInfo{}, fmt.Errorf("etcd: %s (code %d)", m.Error.Message, m.Error.Code)
		}
		if m.Result == nil {
			return SnapshotInfo{}, fmt.Errorf("a message of the stream after %d bytes has no result", size)
		}
		if pending != nil {
			db.Write(pending)
		}
		pending = m.Result.Blob
		if _, err := w.Write(pending); err != nil {
			return SnapshotInfo{}, err
		}
		all.Write(pending)
		size += int64(len(pending))
		if s := m.Result.RemainingBytes.String(); s == "" || s == "0" {
			lastSeen = true
		} else if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return SnapshotInfo{}, fmt.Errorf("remaining_bytes %q: %w", s, err)
		}
	}
	if !lastSeen || size <= sha256.Size {
		return SnapshotInfo{}, fmt.Errorf("the stream ended after %d bytes without its last chunk and hash", size)
	}
	if !bytes.Equal(pending, db.Sum(nil)) {
		return SnapshotInfo{}, fmt.Errorf("the snapshot's %d bytes do not match the sha256 etcd sent last", size-int64(len(pending)))
	}
	return SnapshotInfo{Size: size, SHA256: hex.EncodeToString(all.Sum(nil))}, nil
}
