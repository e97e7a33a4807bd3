package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// etcd snapshots of workload clusters whose control plane capn runs
// (kube-local). The node agent of a control-plane machine takes the
// snapshot and restores it (it has the etcd certificates and the data
// dir); this service picks the machine, seals the snapshot with the
// secrets keyring and keeps it in the etcd-snapshots object store as
// <cluster>/<name>. See README.md.

// Verbs of the backup service's etcd requests (capn.backup.<verb>).
const (
	VerbEtcdSnapshot = "etcd-snapshot"
	VerbEtcdList     = "etcd-list"
	VerbEtcdRestore  = "etcd-restore"
)

// Header names of the agents' snapshot replies (cmd/capn-node/agent).
const (
	headerEtcdSeq   = "Capn-Etcd-Seq"
	headerEtcdFinal = "Capn-Etcd-Final"
)

// Etcd command ops (cmd/capn-node/agent).
const (
	opSnapshot       = "snapshot"
	opRestoreChunk   = "restore-chunk"
	opRestorePrepare = "restore-prepare"
	opRestoreStart   = "restore-start"
	opRestoreAbort   = "restore-abort"
	opHealth         = "health"
)

// metaEtcdSnapshot is the object metadata key holding a snapshot's
// EtcdSnapshotInfo (protojson).
const metaEtcdSnapshot = "capn-etcd-snapshot"

// CodeUnavailable: the service cannot do it as configured (no key) or no
// machine answers.
const CodeUnavailable = "unavailable"

// KubeLocal is the bootstrap provider whose control planes capn runs.
const KubeLocal = "kube-local"

// etcdChunkBytes is the size of the chunks a restore sends an agent.
const etcdChunkBytes = 512 << 10

// EtcdObjectName is a snapshot's object name: <cluster>/<name>.
func EtcdObjectName(cluster, name string) string { return cluster + "/" + name }

// etcdSealName binds a sealed snapshot to its object: a sealed snapshot
// put under another name (another cluster's) does not open.
func etcdSealName(cluster, name string) string { return "etcdsnapshot." + cluster + "." + name }

// clusterNameRE is what a cluster's name is (a DNS label).
var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func checkClusterName(name string) error {
	if !clusterNameRE.MatchString(name) {
		return errors.New("want a cluster's name: 1 to 63 lowercase letters, digits and dashes")
	}
	return nil
}

// etcdCluster is a cluster whose etcd can be snapshotted: its control-plane
// machines (sorted) and its policy.
type etcdCluster struct {
	name     string
	machines []string
	policy   *capnv1.EtcdSnapshotPolicy
}

// etcdClusterOf reads the cluster and its control-plane machines, and
// refuses a cluster whose control plane capn does not run.
func (s *Service) etcdClusterOf(ctx context.Context, cluster string) (*etcdCluster, *capnv1.BackupError) {
	c, cps, _, berr := s.kubeLocalCluster(ctx, cluster, "to seal etcd snapshots", "etcd snapshots need")
	if berr != nil {
		return nil, berr
	}
	return &etcdCluster{name: cluster, policy: c.GetSpec().GetEtcdSnapshots(), machines: cps}, nil
}

// onEtcdSnapshot answers capn.backup.etcd-snapshot.
func (s *Service) onEtcdSnapshot(ctx context.Context, data []byte) proto.Message {
	req := &capnv1.EtcdSnapshotRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		return &capnv1.EtcdSnapshotResult{Error: refuse(CodeInvalid, "the request does not decode: "+err.Error())}
	}
	log := s.log.With().Str("cluster", req.GetCluster()).Str("requested_by", req.GetRequestedBy()).Logger()
	info, berr := s.etcdSnapshot(log.WithContext(ctx), req.GetCluster(), TriggerAPI, req.GetRequestedBy())
	if berr != nil {
		log.Warn().Str("code", berr.GetCode()).Str("error", berr.GetMessage()).Msg("etcd snapshot refused or failed")
	}
	return &capnv1.EtcdSnapshotResult{Snapshot: info, Error: berr}
}

// etcdSnapshot takes one snapshot of cluster from the first control-plane
// machine that gives one, seals and stores it, then prunes the cluster's
// snapshots to its keep.
func (s *Service) etcdSnapshot(ctx context.Context, cluster, trigger, by string) (*capnv1.EtcdSnapshotInfo, *capnv1.BackupError) {
	ec, berr := s.etcdClusterOf(ctx, cluster)
	if berr != nil {
		return nil, berr
	}
	log := zerolog.Ctx(ctx)
	var errs []string
	for _, m := range ec.machines {
		log.Info().Str("machine", m).Msg("asking for an etcd snapshot")
		data, reply, err := s.fetchSnapshot(ctx, cluster, m)
		if err != nil {
			errs = append(errs, m+": "+err.Error())
			continue
		}
		now := s.cfg.Now().UTC()
		info := &capnv1.EtcdSnapshotInfo{
			Cluster: cluster, Name: now.Format("20060102T150405.000Z") + "-" + trigger, Created: timestamppb.New(now),
			Trigger: trigger, Size: reply.GetSize(), Revision: reply.GetRevision(), Members: reply.GetMembers(),
			Machine: m, Sha256: reply.GetSha256(), SealKeyId: s.cfg.Keyring.PrimaryID(), RequestedBy: by,
		}
		sealed, err := s.cfg.Keyring.Seal(etcdSealName(cluster, info.GetName()), data)
		if err != nil {
			return nil, refuse(CodeInternal, "seal the snapshot: "+err.Error())
		}
		line, err := protojson.Marshal(info)
		if err == nil {
			_, err = s.etcdObjects.Put(ctx, jetstream.ObjectMeta{Name: EtcdObjectName(cluster, info.GetName()),
				Description: "etcd snapshot of " + cluster + " (" + trigger + ", sealed)",
				Metadata:    map[string]string{metaEtcdSnapshot: string(line)}}, bytes.NewReader(sealed))
		}
		if err != nil {
			return nil, refuse(CodeInternal, fmt.Sprintf("store etcd snapshot %s: %v", info.GetName(), err))
		}
		log.Info().Str("snapshot", info.GetName()).Str("machine", m).Uint64("bytes", info.GetSize()).Int64("revision", info.GetRevision()).
			Int("members", len(info.GetMembers())).Msg("etcd snapshot stored")
		if err := s.pruneEtcd(ctx, cluster, keepOf(ec.policy)); err != nil {
			log.Warn().Err(err).Msg("cannot prune old etcd snapshots")
		}
		return info, nil
	}
	return nil, refuse(CodeUnavailable, "no control-plane machine of "+cluster+" gave a snapshot: "+strings.Join(errs, "; "))
}

// DefaultEtcdKeep is how many snapshots of a cluster are kept when its
// policy says none.
const DefaultEtcdKeep = 5

func keepOf(p *capnv1.EtcdSnapshotPolicy) int {
	if p.GetKeep() > 0 {
		return int(p.GetKeep())
	}
	return DefaultEtcdKeep
}

// fetchSnapshot asks machine's agent for a snapshot and reads its chunks:
// numbered from 1 without a gap, then the final reply, whose size and
// sha256 the bytes must match.
func (s *Service) fetchSnapshot(ctx context.Context, cluster, machine string) ([]byte, *capnv1.EtcdNodeReply, error) {
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest(keys.EtcdCommand(cluster, machine, opSnapshot), inbox, mustMarshal(&capnv1.EtcdNodeCommand{})); err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	seq := 0
	for {
		mctx, cancel := context.WithTimeout(ctx, s.cfg.EtcdWait)
		m, err := sub.NextMsgWithContext(mctx)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("after %d chunks: %w (no agent answers, or it stopped)", seq, err)
		}
		if m.Header.Get("Status") == "503" {
			return nil, nil, errors.New("no agent answers (the machine is down or runs no capn-node)")
		}
		if m.Header.Get(headerEtcdFinal) != "" {
			reply := &capnv1.EtcdNodeReply{}
			if err := proto.Unmarshal(m.Data, reply); err != nil {
				return nil, nil, fmt.Errorf("the agent's answer does not decode: %w", err)
			}
			if reply.GetError() != "" {
				return nil, nil, errors.New(reply.GetError())
			}
			sum := sha256.Sum256(buf.Bytes())
			if uint64(buf.Len()) != reply.GetSize() || hex.EncodeToString(sum[:]) != reply.GetSha256() {
				return nil, nil, fmt.Errorf("received %d bytes in %d chunks, the agent sent %d bytes (sha256 %s): chunks were lost", buf.Len(), seq, reply.GetSize(), reply.GetSha256())
			}
			return buf.Bytes(), reply, nil
		}
		n, err := strconv.Atoi(m.Header.Get(headerEtcdSeq))
		if err != nil || n != seq+1 {
			return nil, nil, fmt.Errorf("chunk %q after chunk %d: chunks were lost", m.Header.Get(headerEtcdSeq), seq)
		}
		seq = n
		if int64(buf.Len()+len(m.Data)) > s.cfg.EtcdMaxBytes {
			return nil, nil, fmt.Errorf("the snapshot is larger than %d bytes (--etcd-snapshot-max-bytes)", s.cfg.EtcdMaxBytes)
		}
		buf.Write(m.Data)
	}
}

// command sends one etcd command to machine's agent and waits for its
// reply; a reply's error is an error.
func (s *Service) command(ctx context.Context, cluster, machine, op string, cmd *capnv1.EtcdNodeCommand, timeout time.Duration) (*capnv1.EtcdNodeReply, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, keys.EtcdCommand(cluster, machine, op), mustMarshal(cmd))
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%s: no agent answers (the machine is down or runs no capn-node)", machine)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", machine, op, err)
	}
	reply := &capnv1.EtcdNodeReply{}
	if err := proto.Unmarshal(m.Data, reply); err != nil {
		return nil, fmt.Errorf("%s: the answer does not decode: %w", machine, err)
	}
	if reply.GetError() != "" {
		return reply, fmt.Errorf("%s: %s: %s", machine, op, reply.GetError())
	}
	return reply, nil
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// onEtcdList answers capn.backup.etcd-list.
func (s *Service) onEtcdList(ctx context.Context, data []byte) proto.Message {
	req := &capnv1.EtcdSnapshotListRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		return &capnv1.EtcdSnapshotList{Error: refuse(CodeInvalid, "the request does not decode: "+err.Error())}
	}
	if err := checkClusterName(req.GetCluster()); err != nil {
		return &capnv1.EtcdSnapshotList{Error: refuse(CodeInvalid, fmt.Sprintf("cluster %q: %v", req.GetCluster(), err))}
	}
	list, err := s.listEtcd(ctx, req.GetCluster())
	if err != nil {
		return &capnv1.EtcdSnapshotList{Error: refuse(CodeInternal, err.Error())}
	}
	out := &capnv1.EtcdSnapshotList{Snapshots: list}
	if st, _, err := s.etcdStatus.Get(ctx, keys.EtcdSnapshotStatus(req.GetCluster())); err == nil {
		out.Status = st
	}
	return out
}

// listEtcd is cluster's snapshots, oldest first.
func (s *Service) listEtcd(ctx context.Context, cluster string) ([]*capnv1.EtcdSnapshotInfo, error) {
	infos, err := s.etcdObjects.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list etcd snapshots: %w", err)
	}
	var out []*capnv1.EtcdSnapshotInfo
	for _, i := range infos {
		if !strings.HasPrefix(i.Name, cluster+"/") {
			continue
		}
		info := &capnv1.EtcdSnapshotInfo{}
		if err := protojson.Unmarshal([]byte(i.Metadata[metaEtcdSnapshot]), info); err != nil || info.GetCluster() != cluster {
			continue
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b *capnv1.EtcdSnapshotInfo) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// pruneEtcd deletes cluster's oldest snapshots beyond keep.
func (s *Service) pruneEtcd(ctx context.Context, cluster string, keep int) error {
	list, err := s.listEtcd(ctx, cluster)
	if err != nil || len(list) <= keep {
		return err
	}
	for _, i := range list[:len(list)-keep] {
		if err := s.etcdObjects.Delete(ctx, EtcdObjectName(cluster, i.GetName())); err != nil {
			return fmt.Errorf("delete etcd snapshot %s: %w", i.GetName(), err)
		}
		zerolog.Ctx(ctx).Info().Str("snapshot", i.GetName()).Int("keep", keep).Msg("old etcd snapshot deleted")
	}
	return nil
}

// loadEtcd reads and opens a stored snapshot, checking its sha256.
func (s *Service) loadEtcd(ctx context.Context, cluster, name string) (*capnv1.EtcdSnapshotInfo, []byte, *capnv1.BackupError) {
	obj, err := s.etcdObjects.Get(ctx, EtcdObjectName(cluster, name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil, refuse(CodeNotFound, fmt.Sprintf("cluster %s has no etcd snapshot %s", cluster, name))
	}
	if err != nil {
		return nil, nil, refuse(CodeInternal, err.Error())
	}
	defer obj.Close()
	oi, err := obj.Info()
	if err != nil {
		return nil, nil, refuse(CodeInternal, err.Error())
	}
	info := &capnv1.EtcdSnapshotInfo{}
	if err := protojson.Unmarshal([]byte(oi.Metadata[metaEtcdSnapshot]), info); err != nil {
		return nil, nil, refuse(CodeInvalid, "etcd snapshot "+name+" has no readable description: "+err.Error())
	}
	sealed, err := io.ReadAll(obj)
	if err != nil {
		return nil, nil, refuse(CodeInternal, err.Error())
	}
	data, err := s.cfg.Keyring.Open(etcdSealName(cluster, name), sealed)
	if err != nil {
		return nil, nil, refuse(CodeKeys, fmt.Sprintf("etcd snapshot %s does not open with this service's keys (sealed with key %s): %v", name, info.GetSealKeyId(), err))
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != info.GetSha256() || uint64(len(data)) != info.GetSize() {
		return nil, nil, refuse(CodeInvalid, "etcd snapshot "+name+" does not match its description (size or sha256)")
	}
	return info, data, nil
}
