package agent

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// etcd snapshots and restores, asked by the backup service on
// capn.etcd.<cluster>.<machine>.<op> (keys.EtcdCommand): only this
// machine's subjects, which the auth callout lets it subscribe
// (bootstrapper.MachinePermissions), with as many replies to each request
// as a snapshot's chunks. The agent never touches the object store: the
// backup service seals and keeps what it sends.

// Etcd command ops (the subject's last token).
const (
	EtcdOpSnapshot       = "snapshot"
	EtcdOpRestoreChunk   = "restore-chunk"
	EtcdOpRestorePrepare = "restore-prepare"
	EtcdOpRestoreStart   = "restore-start"
	EtcdOpRestoreAbort   = "restore-abort"
	EtcdOpHealth         = "health"
)

// Headers of a snapshot's replies: each chunk's sequence number (from 1),
// and the final reply (an EtcdNodeReply).
const (
	HeaderEtcdSeq   = "Capn-Etcd-Seq"
	HeaderEtcdFinal = "Capn-Etcd-Final"
)

// EtcdChunkBytes is the size of a snapshot's chunks (under NATS's default
// 1 MiB payload).
const EtcdChunkBytes = 512 << 10

// EtcdRuntime is what the etcd commands need of the control plane
// (kube.Runtime).
type EtcdRuntime interface {
	EtcdSnapshot(ctx context.Context, w io.Writer) (kube.SnapshotInfo, error)
	EtcdSelf() kube.Member
	EtcdHealth(ctx context.Context) error
	StageRestore(id string, offset int64, data []byte) (int64, error)
	PrepareRestore(ctx context.Context, id string, size int64, sum, initialCluster, token string) error
	StartRestored(ctx context.Context, id string) error
	AbortRestore(id string) error
	Restoring() bool
	Ready() bool
}

// serveEtcd answers the etcd commands until ctx ends.
func (a *Agent) serveEtcd(ctx context.Context, nc *nats.Conn) (func(), error) {
	var wg sync.WaitGroup
	sub, err := nc.Subscribe(keys.EtcdCommand(a.cfg.Cluster, a.cfg.Machine, "*"), func(m *nats.Msg) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.onEtcd(ctx, nc, m)
		}()
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe(); wg.Wait() }, nil
}

// etcdRuntime is the running control plane, or why there is none.
func (a *Agent) etcdRuntime() (EtcdRuntime, error) {
	ks := a.kube.Load()
	if ks == nil {
		return nil, fmt.Errorf("machine %s/%s runs no control plane", a.cfg.Cluster, a.cfg.Machine)
	}
	ks.mu.Lock()
	fail := ks.fail
	ks.mu.Unlock()
	if fail != nil {
		return nil, fmt.Errorf("the control plane does not run: %s", fail.Message)
	}
	rt, ok := ks.rt.(EtcdRuntime)
	if !ok {
		return nil, fmt.Errorf("machine %s/%s runs no etcd", a.cfg.Cluster, a.cfg.Machine)
	}
	return rt, nil
}

func (a *Agent) onEtcd(ctx context.Context, nc *nats.Conn, m *nats.Msg) {
	op := m.Subject[strings.LastIndex(m.Subject, ".")+1:]
	log := a.log.With().Str("op", op).Logger()
	reply := &capnv1.EtcdNodeReply{}
	respond := func() {
		data, _ := proto.Marshal(reply)
		out := nats.NewMsg(m.Reply)
		out.Header.Set(HeaderEtcdFinal, "1")
		out.Data = data
		if err := nc.PublishMsg(out); err != nil {
			log.Warn().Err(err).Msg("cannot answer an etcd command")
		}
	}
	if m.Reply == "" {
		return
	}
	cmd := &capnv1.EtcdNodeCommand{}
	if err := proto.Unmarshal(m.Data, cmd); err != nil {
		reply.Error = "the command does not decode: " + err.Error()
		respond()
		return
	}
	rt, err := a.etcdRuntime()
	if err != nil {
		reply.Error = err.Error()
		respond()
		return
	}
	self := rt.EtcdSelf()
	reply.Member = &capnv1.EtcdMemberInfo{Name: self.Name, PeerUrls: self.PeerURLs}
	id := cmd.GetRestoreId()
	switch op {
	case EtcdOpSnapshot:
		log.Info().Msg("taking an etcd snapshot")
		w := &chunkWriter{nc: nc, subject: m.Reply, buf: make([]byte, 0, EtcdChunkBytes)}
		info, err := rt.EtcdSnapshot(ctx, w)
		if err == nil {
			err = w.flush()
		}
		if err != nil {
			reply.Error = "etcd snapshot: " + err.Error()
			break
		}
		reply.Size, reply.Sha256, reply.Revision = uint64(info.Size), info.SHA256, info.Revision
		for _, mem := range info.Members {
			reply.Members = append(reply.Members, memberInfo(mem))
		}
		log.Info().Int64("bytes", info.Size).Int64("revision", info.Revision).Int("chunks", w.seq).Msg("etcd snapshot sent")
	case EtcdOpRestoreChunk:
		n, err := rt.StageRestore(id, int64(cmd.GetOffset()), cmd.GetChunk())
		reply.Size = uint64(n)
		if err != nil {
			reply.Error = err.Error()
		}
	case EtcdOpRestorePrepare:
		log.Warn().Str("restore", id).Str("initial_cluster", cmd.GetInitialCluster()).Msg("preparing an etcd restore: the control plane stops")
		if err := rt.PrepareRestore(ctx, id, int64(cmd.GetSize()), cmd.GetSha256(), cmd.GetInitialCluster(), cmd.GetToken()); err != nil {
			reply.Error = err.Error()
		}
	case EtcdOpRestoreStart:
		log.Warn().Str("restore", id).Msg("starting the control plane on the restored etcd data")
		if err := rt.StartRestored(ctx, id); err != nil {
			reply.Error = err.Error()
		}
	case EtcdOpRestoreAbort:
		log.Warn().Str("restore", id).Msg("aborting an etcd restore")
		if err := rt.AbortRestore(id); err != nil {
			reply.Error = err.Error()
		}
	case EtcdOpHealth:
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		herr := rt.EtcdHealth(hctx)
		cancel()
		reply.EtcdHealthy, reply.ApiReady = herr == nil, rt.Ready() && !rt.Restoring()
		if herr != nil {
			reply.Message = herr.Error()
		} else if rt.Restoring() {
			reply.Message = "the Node is not registered again yet"
		}
	default:
		reply.Error = fmt.Sprintf("unknown etcd op %q", op)
	}
	respond()
}

func memberInfo(m kube.Member) *capnv1.EtcdMemberInfo {
	return &capnv1.EtcdMemberInfo{Name: m.Name, Id: m.ID.String(), PeerUrls: m.PeerURLs, IsLearner: m.IsLearner}
}

// chunkWriter publishes what is written to subject in chunks of
// cap(buf) bytes, numbered from 1 (HeaderEtcdSeq).
type chunkWriter struct {
	nc      *nats.Conn
	subject string
	buf     []byte
	seq     int
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(cap(w.buf)-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.seq++
	m := nats.NewMsg(w.subject)
	m.Header.Set(HeaderEtcdSeq, strconv.Itoa(w.seq))
	m.Data = append([]byte(nil), w.buf...)
	w.buf = w.buf[:0]
	return w.nc.PublishMsg(m)
}
