package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

const etcdHelp = `
Snapshots of a workload cluster's etcd, for clusters whose control plane
capn runs (bootstrap provider kube-local). The node agent of a
control-plane machine takes the snapshot; the backup service keeps it
sealed (with the secrets bucket's key) in the etcd-snapshots object
store, the cluster's newest few (spec.etcdSnapshots.keep, default 5).

  capn etcd snapshot CLUSTER             take a snapshot now (token scope: secrets)
  capn etcd snapshots CLUSTER            list the cluster's snapshots and its schedule's state (read)
  capn etcd restore CLUSTER SNAPSHOT     restore etcd on every control-plane member (secrets, write)

A restore stops every control-plane member, restores the snapshot into a
fresh data dir on each (same member names and peer URLs, a new cluster
token), starts them again and answers once every member is healthy and
every API server ready. Everything written to the cluster after the
snapshot is lost. Scheduled snapshots: spec.etcdSnapshots.every.

Examples:
  capn etcd snapshot demo
  capn etcd snapshots demo
  capn etcd restore demo 20260102T030405.000Z-api
`

func cmdEtcd(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn etcd snapshot CLUSTER | snapshots CLUSTER | restore CLUSTER SNAPSHOT", etcdHelp)
	var a apiFlags
	a.bind(fs)
	const name = "capn etcd"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	verb := ""
	if len(pos) > 0 {
		verb, pos = pos[0], pos[1:]
	}
	switch {
	case (verb == "snapshot" || verb == "snapshots") && len(pos) == 1:
	case verb == "restore" && len(pos) == 2:
	default:
		return reportError(e.stderr, name, nil, usageError{fmt.Sprintf("unexpected %q: want snapshot CLUSTER, snapshots CLUSTER or restore CLUSTER SNAPSHOT", strings.Join(append([]string{verb}, pos...), " "))})
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	switch verb {
	case "snapshot":
		info, err := s.c.EtcdSnapshot(ctx, pos[0])
		if err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "etcd snapshot %s of %s: %d bytes at revision %d, from %s (%s); sealed with key %s\n",
			info.GetName(), pos[0], info.GetSize(), info.GetRevision(), info.GetMachine(), memberNames(info.GetMembers()), info.GetSealKeyId())
	case "snapshots":
		l, err := s.c.EtcdSnapshots(ctx, pos[0])
		if err != nil {
			return s.fail(err)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tTRIGGER\tBYTES\tREVISION\tMEMBERS")
		for _, i := range l.GetSnapshots() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", i.GetName(), i.GetCreated().AsTime().Local().Format(time.DateTime), i.GetTrigger(),
				i.GetSize(), i.GetRevision(), memberNames(i.GetMembers()))
		}
		_ = tw.Flush()
		if st := l.GetStatus(); st != nil {
			line := "schedule: every " + st.GetEvery().AsDuration().String() + fmt.Sprintf(", keep %d", st.GetKeep())
			if st.GetLastSuccess() != nil {
				line += ", last success " + st.GetLastSuccess().AsTime().Local().Format(time.DateTime)
			}
			if st.GetNext() != nil {
				line += ", next " + st.GetNext().AsTime().Local().Format(time.DateTime)
			}
			fmt.Fprintln(e.stdout, line)
			for _, c := range st.GetConditions() {
				if c.GetStatus() != "True" {
					fmt.Fprintf(e.stdout, "  %s=%s %s: %s\n", c.GetType(), c.GetStatus(), c.GetReason(), c.GetMessage())
				}
			}
		}
	case "restore":
		fmt.Fprintf(e.stderr, "restoring %s's etcd from %s on every control-plane member: its API is down until they are back\n", pos[0], pos[1])
		res, err := s.c.EtcdRestore(ctx, pos[0], pos[1])
		if err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "restored %s's etcd from %s (revision %d) on %d members (%s) in %s: every member healthy, every API server ready\n",
			pos[0], pos[1], res.GetSnapshot().GetRevision(), len(res.GetMembers()), memberNames(res.GetMembers()), res.GetTook().AsDuration().Round(time.Millisecond))
	}
	return daemon.ExitOK
}

func memberNames(ms []*capnv1.EtcdMemberInfo) string {
	var names []string
	for _, m := range ms {
		names = append(names, m.GetName())
	}
	return strings.Join(names, ",")
}
