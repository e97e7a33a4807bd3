package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// Cluster classes in the CLI: capn get clusterclasses, capn delete
// clusterclass (capn apply takes a class manifest, capn rollout rolls a
// revision out).

// classUse is how many clusters name a class, and how many of them are at
// its current revision (the gateway's status.topology.upToDate).
type classUse struct {
	clusters, upToDate int
}

// getClasses prints capn get clusterclasses [NAME...]: the table counts
// each class's clusters (from the cluster list); -o json|yaml|name prints
// the classes themselves.
func (s *session) getClasses(ctx context.Context, o getOpts) error {
	var classes []*capnv1.ClusterClass
	if len(o.names) > 0 {
		for _, name := range o.names {
			c, err := s.c.Class(ctx, name, 0)
			if err != nil {
				return err
			}
			classes = append(classes, c)
		}
	} else {
		var err error
		if classes, err = s.c.Classes(ctx); err != nil {
			return err
		}
	}
	w := s.e.stdout
	switch o.output {
	case outTable, outWide:
		if len(classes) == 0 {
			fmt.Fprintln(s.e.stderr, "No resources found.")
			return nil
		}
		cs, err := s.c.List(ctx, client.ListOptions{})
		if err != nil {
			return err
		}
		use := map[string]classUse{}
		for _, c := range cs {
			t := c.GetSpec().GetTopology()
			if t == nil {
				continue
			}
			u := use[t.GetClass()]
			u.clusters++
			if c.GetStatus().GetTopology().GetUpToDate() {
				u.upToDate++
			}
			use[t.GetClass()] = u
		}
		now := time.Now()
		rows := [][]string{classHeader(o.output == outWide)}
		for _, c := range classes {
			rows = append(rows, classRow(c, use[c.GetMetadata().GetName()], now, o.output == outWide))
		}
		writeTable(w, rows)
		return nil
	}
	objs := make([]proto.Message, len(classes))
	for i, c := range classes {
		objs[i] = c
	}
	return printObjects(w, o.output, api.KindClusterClassList, len(o.names) == 1, objs)
}

func classHeader(wide bool) []string {
	h := []string{"NAME", "REVISION", "VARIABLES", "POOL CLASSES", "CLUSTERS", "UP-TO-DATE", "AGE"}
	if wide {
		h = append(h, "VERSION", "REVISED", "HASH")
	}
	return h
}

// classRow: VARIABLES counts them (how many required), POOL CLASSES names
// them, CLUSTERS counts the clusters of the class and UP-TO-DATE those at
// its current revision; REVISED is the age of the current revision.
func classRow(c *capnv1.ClusterClass, u classUse, now time.Time, wide bool) []string {
	sp, md, st := c.GetSpec(), c.GetMetadata(), c.GetStatus()
	vars := strconv.Itoa(len(sp.GetVariables()))
	required := 0
	for _, v := range sp.GetVariables() {
		if v.GetRequired() {
			required++
		}
	}
	if required > 0 {
		vars += fmt.Sprintf(" (%d required)", required)
	}
	var pools []string
	for _, p := range sp.GetPoolClasses() {
		pools = append(pools, p.GetName())
	}
	r := []string{md.GetName(), strconv.FormatInt(st.GetRevision(), 10), vars, orNone(strings.Join(pools, ",")),
		strconv.Itoa(u.clusters), strconv.Itoa(u.upToDate), age(md.GetCreationTimestamp(), now)}
	if wide {
		hash := st.GetHash()
		if len(hash) > 12 {
			hash = hash[:12]
		}
		r = append(r, orNone(sp.GetTemplate().GetKubernetesVersion()), age(st.GetUpdated(), now), orNone(hash))
	}
	return r
}

// deleteClasses is capn delete clusterclass NAME...: each class is
// deleted with its revisions, or refused (the gateway names the clusters
// that still use it).
func deleteClasses(ctx context.Context, e env, a apiFlags, names []string) int {
	const name = "capn delete"
	if len(names) == 0 {
		return reportError(e.stderr, name, nil, usagef("missing the cluster classes to delete: capn delete clusterclass NAME..."))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	for _, n := range names {
		if _, err := s.c.DeleteClass(ctx, n); err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "clusterclass/%s deleted\n", n)
	}
	return daemon.ExitOK
}
