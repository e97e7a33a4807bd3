package backup

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// A restore of a cluster's etcd, on every control-plane machine (etcd's
// disaster recovery: every member from the same snapshot, a new cluster):
//
//	load + open the snapshot, check its sha256
//	health ─► every machine's member (name, peer URL): the initial cluster
//	restore-chunk… ─► each machine holds the snapshot (checked at prepare)
//	restore-prepare ─► each stops its control plane and restores into a
//	                   fresh data dir (etcdutl); any failure: restore-abort
//	                   to all (their old data untouched) and refuse
//	restore-start ─► each swaps the data dir and starts again
//	health… ─► until every member is healthy and every API server ready
//	           (EtcdRestoreWait)

// onEtcdRestore answers capn.backup.etcd-restore.
func (s *Service) onEtcdRestore(ctx context.Context, data []byte) proto.Message {
	req := &capnv1.EtcdRestoreRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		return &capnv1.EtcdRestoreResult{Error: refuse(CodeInvalid, "the request does not decode: "+err.Error())}
	}
	log := s.log.With().Str("cluster", req.GetCluster()).Str("snapshot", req.GetSnapshot()).Str("requested_by", req.GetRequestedBy()).Logger()
	if req.GetSnapshot() == "" {
		return &capnv1.EtcdRestoreResult{Error: refuse(CodeInvalid, "snapshot: required (a name capn etcd snapshots lists)")}
	}
	s.etcdRestoring.Lock()
	defer s.etcdRestoring.Unlock()
	start := s.cfg.Now()
	res, berr := s.etcdRestore(log.WithContext(ctx), req.GetCluster(), req.GetSnapshot())
	if berr != nil {
		log.Warn().Str("code", berr.GetCode()).Str("error", berr.GetMessage()).Msg("etcd restore refused or failed")
		return &capnv1.EtcdRestoreResult{Error: berr}
	}
	res.Took = durationpb.New(s.cfg.Now().Sub(start))
	log.Info().Dur("took", res.GetTook().AsDuration()).Int("members", len(res.GetMembers())).Msg("etcd restored")
	return res
}

func (s *Service) etcdRestore(ctx context.Context, cluster, name string) (*capnv1.EtcdRestoreResult, *capnv1.BackupError) {
	ec, berr := s.etcdClusterOf(ctx, cluster)
	if berr != nil {
		return nil, berr
	}
	info, data, berr := s.loadEtcd(ctx, cluster, name)
	if berr != nil {
		return nil, berr
	}
	log := zerolog.Ctx(ctx)
	step := s.cfg.EtcdWait
	// Every member must answer: a member left out would keep the old data
	// and join nothing.
	var members []*capnv1.EtcdMemberInfo
	for _, m := range ec.machines {
		r, err := s.command(ctx, cluster, m, opHealth, &capnv1.EtcdNodeCommand{}, step)
		if err != nil {
			return nil, refuse(CodeUnavailable, "every control-plane machine must answer before a restore: "+err.Error())
		}
		if r.GetMember().GetName() == "" || len(r.GetMember().GetPeerUrls()) == 0 {
			return nil, refuse(CodeInternal, m+": the agent did not name its etcd member")
		}
		members = append(members, r.GetMember())
	}
	initial := InitialCluster(members)
	id := "r" + strconv.FormatInt(s.cfg.Now().UnixMilli(), 36)
	token := cluster + "-" + id
	log.Warn().Str("restore", id).Str("initial_cluster", initial).Strs("machines", ec.machines).Msg("restoring etcd on every control-plane machine")
	abort := func(why string) *capnv1.BackupError {
		for _, m := range ec.machines {
			if _, err := s.command(ctx, cluster, m, opRestoreAbort, &capnv1.EtcdNodeCommand{RestoreId: id}, step); err != nil {
				log.Error().Err(err).Str("machine", m).Msg("cannot abort the etcd restore")
			}
		}
		return refuse(CodeInternal, why+" (aborted: every member kept its data)")
	}
	for _, m := range ec.machines {
		for off := 0; off < len(data) || off == 0; off += etcdChunkBytes {
			end := min(off+etcdChunkBytes, len(data))
			if _, err := s.command(ctx, cluster, m, opRestoreChunk, &capnv1.EtcdNodeCommand{RestoreId: id, Offset: uint64(off), Chunk: data[off:end]}, step); err != nil {
				return nil, abort("send the snapshot: " + err.Error())
			}
		}
	}
	prep := &capnv1.EtcdNodeCommand{RestoreId: id, Size: uint64(len(data)), Sha256: info.GetSha256(), InitialCluster: initial, Token: token}
	for _, m := range ec.machines {
		if _, err := s.command(ctx, cluster, m, opRestorePrepare, prep, 2*step); err != nil {
			return nil, abort("prepare: " + err.Error())
		}
	}
	var startErrs []string
	for _, m := range ec.machines {
		if _, err := s.command(ctx, cluster, m, opRestoreStart, &capnv1.EtcdNodeCommand{RestoreId: id}, step); err != nil {
			startErrs = append(startErrs, err.Error())
		}
	}
	if len(startErrs) > 0 {
		return nil, refuse(CodeInternal, "start on the restored data: "+strings.Join(startErrs, "; ")+" (the others run on the restored data; ask again to restore once more)")
	}
	if err := s.waitRestored(ctx, cluster, ec.machines); err != nil {
		return nil, refuse(CodeInternal, err.Error())
	}
	return &capnv1.EtcdRestoreResult{Snapshot: info, Members: members}, nil
}

// waitRestored waits until every member is healthy and every API server
// ready again.
func (s *Service) waitRestored(ctx context.Context, cluster string, machines []string) error {
	deadline := s.cfg.Now().Add(s.cfg.EtcdRestoreWait)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		var waiting []string
		for _, m := range machines {
			r, err := s.command(ctx, cluster, m, opHealth, &capnv1.EtcdNodeCommand{}, 10*time.Second)
			switch {
			case err != nil:
				waiting = append(waiting, err.Error())
			case !r.GetEtcdHealthy() || !r.GetApiReady():
				waiting = append(waiting, fmt.Sprintf("%s: etcd healthy %t, API server ready %t %s", m, r.GetEtcdHealthy(), r.GetApiReady(), r.GetMessage()))
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if s.cfg.Now().After(deadline) {
			return fmt.Errorf("the restored cluster is not healthy after %s: %s", s.cfg.EtcdRestoreWait, strings.Join(waiting, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// InitialCluster is etcd's --initial-cluster of members: name=peerURL,
// sorted.
func InitialCluster(members []*capnv1.EtcdMemberInfo) string {
	var parts []string
	for _, m := range members {
		for _, u := range m.GetPeerUrls() {
			parts = append(parts, m.GetName()+"="+u)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
