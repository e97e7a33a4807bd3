package sim

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// HeartbeatKind is the last token of a simulated node's heartbeat subject:
// capn.health.<cluster>.<machine>.heartbeat.
const HeartbeatKind = keys.HealthHeartbeat

// beat is one heartbeat to publish: what a kubelet's node status update
// would say, for a node that is always Ready.
type beat struct {
	cluster, machine, version string
	// seq is the heartbeat's scheduled time in Unix milliseconds: unique
	// per machine and increasing, across restarts of the provider too.
	seq int64
}

func beatOf(m *machine, at time.Time) beat {
	return beat{cluster: m.im.GetCluster(), machine: m.im.GetMachine(), version: m.version, seq: at.UnixMilli()}
}

// HeartbeatID is the event id of a simulated node's heartbeat:
// heartbeat.<cluster>.<machine>.<seq>, deterministic, so that JetStream
// drops a repeated publish.
func HeartbeatID(cluster, machine string, seq int64) string {
	return events.Subject("heartbeat", cluster, machine, strconv.FormatInt(seq, 10))
}

// publish sends beats as NodeHeartbeat events on the health stream,
// pipelined (asynchronous publishes, then one wait for all acks) so that a
// large fleet's heartbeats cost one round trip per wake-up.
func (p *Provider) publish(ctx context.Context, env sdk.Env, beats []beat) {
	if len(beats) == 0 {
		return
	}
	now := timestamppb.New(p.now())
	futures := make([]jetstream.PubAckFuture, 0, len(beats))
	failed := 0
	var lastErr error
	for _, b := range beats {
		hb := &capnv1.NodeHeartbeat{
			Cluster: b.cluster, Machine: b.machine, NodeName: b.machine,
			Ready: true, KubeletVersion: b.version, Time: now,
		}
		id := HeartbeatID(b.cluster, b.machine, b.seq)
		e, err := events.New(env.Publisher.Source(), events.TypeNodeHeartbeat, id, hb)
		if err != nil {
			failed, lastErr = failed+1, err
			continue
		}
		e.SetSubject(b.machine)
		msg, err := events.ToMsg(events.HealthSubject(b.cluster, b.machine, HeartbeatKind), &e)
		if err != nil {
			failed, lastErr = failed+1, err
			continue
		}
		f, err := env.JS.PublishMsgAsync(msg, jetstream.WithMsgID(id))
		if err != nil {
			failed, lastErr = failed+1, err
			continue
		}
		futures = append(futures, f)
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
wait:
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			failed, lastErr = failed+1, err
		case <-deadline.C:
			failed, lastErr = failed+len(futures)-i, context.DeadlineExceeded
			break wait
		case <-ctx.Done():
			return
		}
	}
	if failed > 0 {
		env.Log.Warn().Err(lastErr).Int("failed", failed).Int("heartbeats", len(beats)).Msg("heartbeats not published")
	}
}
