package kube

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
)

// encodeSnapshotChunk is one message of the stream as etcd's gateway
// writes it.
func encodeSnapshotChunk(blob []byte, remaining int64) string {
	return `{"result":{"remaining_bytes":"` + strconv.FormatInt(remaining, 10) + `","blob":"` + base64.StdEncoding.EncodeToString(blob) + `"}}` + "\n"
}

func TestReadSnapshotStream(t *testing.T) {
	db := bytes.Repeat([]byte("etcd-db-"), 1000)
	dbSum := sha256.Sum256(db)
	whole := append(append([]byte(nil), db...), dbSum[:]...) // what etcdctl snapshot save writes
	sum := sha256.Sum256(whole)
	// As etcd sends it: the chunks (remaining_bytes 0 with the last), then the hash.
	stream := encodeSnapshotChunk(db[:3000], int64(len(db)-3000)) + encodeSnapshotChunk(db[3000:], 0) + encodeSnapshotChunk(dbSum[:], 0)
	bad := sha256.Sum256([]byte("other"))
	tests := []struct {
		name, stream, wantErr string
	}{
		{name: "two chunks and the hash", stream: stream},
		{name: "cut before its last chunk", stream: encodeSnapshotChunk(db[:3000], int64(len(db)-3000)), wantErr: "without its last chunk"},
		{name: "cut before the hash", stream: encodeSnapshotChunk(db[:3000], int64(len(db)-3000)) + encodeSnapshotChunk(db[3000:], 0), wantErr: "do not match"},
		{name: "a wrong hash", stream: encodeSnapshotChunk(db, 0) + encodeSnapshotChunk(bad[:], 0), wantErr: "do not match"},
		{name: "an error of etcd", stream: `{"error":{"grpc_code":14,"message":"etcdserver: no leader"}}`, wantErr: "no leader"},
		{name: "empty", stream: encodeSnapshotChunk(nil, 0), wantErr: "without its last chunk"},
		{name: "no result", stream: `{}`, wantErr: "no result"},
		{name: "not JSON", stream: `<html>`, wantErr: "read the stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			info, err := readSnapshotStream(strings.NewReader(tt.stream), &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), whole) || info.Size != int64(len(whole)) || info.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("got %d bytes, info %+v", out.Len(), info)
			}
		})
	}
}
