package backup

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// Target is what a deployment holds: the keys of each bucket.
type Target map[string]map[string]bool

// PlanOptions shape a restore's plan.
type PlanOptions struct {
	// Merge restores the clusters the deployment does not have; without
	// it a deployment holding any cluster state is refused.
	Merge bool
	// Clusters restores only these (empty: every cluster of the file).
	Clusters []string
	// KeyIDs are the secrets keys the deployment holds; nil: not checked.
	KeyIDs []string
	// Source names the backup (Adoption.source); Now stamps adoptions and
	// refreshes restored nodes' heartbeats.
	Source string
	Now    time.Time
}

// Write is one key to create.
type Write struct {
	Bucket, Key string
	Value       []byte
}

// Adopt is one hand-over to ask a provider for: a machine's
// infrastructure (Record) or a cluster's (ClusterRecord); Key is the
// infra key the provider writes once it has adopted it.
type Adopt struct {
	Provider, Cluster, Machine, Key string
	Record                          *capnv1.InfraMachine
	ClusterRecord                   *capnv1.InfraCluster
}

// ClusterPlan is one cluster's restore, in the order it is applied:
// Writes (its secrets, its observed records — machine statuses held for
// adoption — and its desired machines), then Cluster, its desired record
// (nothing plans a cluster before its record is there), then the
// adoptions.
type ClusterPlan struct {
	Name    string
	Writes  []Write
	Adopt   []Adopt
	Cluster Write
}

// Plan is a restore's plan: the clusters to restore, those a merge leaves
// alone, and the records not restored, each with why.
type Plan struct {
	// Wide are the deployment-wide records (add-on sets, add-on secrets:
	// they belong to no cluster), written before the clusters.
	Wide        []Write
	Clusters    []ClusterPlan
	Conflicts   []*capnv1.RestoreConflict
	Dropped     []string
	KeysChecked bool
}

// Keys counts the keys the plan writes per bucket.
func (p Plan) Keys() map[string]uint64 {
	out := map[string]uint64{}
	for _, w := range p.Wide {
		out[w.Bucket]++
	}
	for _, c := range p.Clusters {
		for _, w := range c.Writes {
			out[w.Bucket]++
		}
		out[c.Cluster.Bucket]++
	}
	return out
}

// Error codes of a refused request (BackupError.code).
const (
	CodeInvalid  = "invalid"
	CodeNotFound = "not_found"
	CodeNotEmpty = "not_empty"
	CodeKeys     = "keys"
	CodeInternal = "internal"
)

func refuse(code, msg string, details ...string) *capnv1.BackupError {
	return &capnv1.BackupError{Code: code, Message: msg, Details: details}
}

// maxConflictKeys bounds the keys a conflict lists.
const maxConflictKeys = 20

// PlanRestore decides what restoring f into target writes, in which order,
// and what it leaves out. It is a pure function (table-tested); f must
// have passed backupfile's Check.
//
//   - A deployment that holds any cluster state (a key of any cluster in
//     any bucket) or deployment-wide record (an add-on set or secret) is
//     refused unless Merge; with Merge a cluster any of whose keys the
//     deployment holds is a conflict, left alone, and so is each
//     deployment-wide record it holds. Deployment-wide records are
//     restored only with the whole file (no Clusters).
//   - Secrets sealed with a key the deployment does not hold are refused.
//   - Records that belong to no desired record of the backup are dropped:
//     a cluster's keys without its desired cluster (a leftover), a
//     machine's status, node, bootstrap data and infrastructure without
//     its desired machine (a deletion that completed as the backup was
//     read), provider announcements (leases of running providers) and the
//     backup service's own records.
//   - Infrastructure records are not written: each live one becomes an
//     adopt for its provider, and the machine's status is held
//     (Adoption) until the provider wrote it back.
//   - A restored node that last said ready counts as heard from now (as
//     the health-watcher counts a fresh node when it restarts).
func PlanRestore(f *backupfile.File, target Target, o PlanOptions) (Plan, *capnv1.BackupError) {
	var p Plan
	inFile := f.Manifest.GetClusters()
	want := inFile
	if len(o.Clusters) > 0 {
		var missing []string
		for _, c := range o.Clusters {
			if !slices.Contains(inFile, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return Plan{}, refuse(CodeNotFound, fmt.Sprintf("the backup holds no cluster %s (it holds %s)", strings.Join(missing, ", "), listOrNone(inFile)))
		}
		want = o.Clusters
	}
	wanted := map[string]bool{}
	for _, c := range want {
		wanted[c] = true
	}

	// What the deployment holds, by cluster, and deployment-wide.
	held := map[string][]string{}
	var heldClusters, heldWide []string
	for _, b := range backupfile.Buckets {
		for k := range target[b] {
			pk, err := keys.Parse(k)
			switch {
			case err != nil:
			case pk.Cluster != "":
				if held[pk.Cluster] == nil {
					heldClusters = append(heldClusters, pk.Cluster)
				}
				held[pk.Cluster] = append(held[pk.Cluster], b+"/"+k)
			case deploymentWide(pk):
				heldWide = append(heldWide, b+"/"+k)
			}
		}
	}
	sort.Strings(heldClusters)
	sort.Strings(heldWide)
	if (len(heldClusters) > 0 || len(heldWide) > 0) && !o.Merge {
		n := 0
		for _, ks := range held {
			n += len(ks)
		}
		what := fmt.Sprintf("%d keys of %d clusters (%s)", n, len(heldClusters), strings.Join(first(heldClusters, 10), ", "))
		if len(heldClusters) == 0 {
			what = "no cluster"
		}
		if len(heldWide) > 0 {
			what += fmt.Sprintf(" and %d deployment-wide records (%s)", len(heldWide), strings.Join(first(heldWide, 5), ", "))
		}
		return Plan{}, refuse(CodeNotEmpty, fmt.Sprintf("the deployment is not empty: it holds %s; restore into an empty deployment, or merge to add only what it does not have", what))
	}

	// The backup's desired machines, by cluster.
	machines := map[string]map[string]bool{}
	for _, e := range f.Entries {
		if k, err := keys.Parse(e.GetKey()); err == nil && e.GetBucket() == backupfile.BucketDesired && k.Kind == keys.KindMachine {
			if machines[k.Cluster] == nil {
				machines[k.Cluster] = map[string]bool{}
			}
			machines[k.Cluster][k.Name] = true
		}
	}

	plans := map[string]*ClusterPlan{}
	for _, c := range want {
		if ks := held[c]; len(ks) > 0 {
			sort.Strings(ks)
			p.Conflicts = append(p.Conflicts, &capnv1.RestoreConflict{Cluster: c, Keys: first(ks, maxConflictKeys),
				Message: fmt.Sprintf("the deployment already holds %d keys of cluster %s: left alone", len(ks), c)})
			continue
		}
		plans[c] = &ClusterPlan{Name: c}
	}

	// Live infrastructure to adopt, by machine key, and its provider id.
	adopted := map[string]string{}
	var secrets, statuses, others, desired []*capnv1.BackupEntry
	var wideConflicts []string
	for _, e := range f.Entries {
		k, _ := keys.Parse(e.GetKey())
		where := e.GetBucket() + "/" + e.GetKey()
		c := k.Cluster
		switch {
		case deploymentWide(k):
			switch {
			case len(o.Clusters) > 0: // only the clusters asked for
			case target[e.GetBucket()][e.GetKey()]:
				wideConflicts = append(wideConflicts, where)
			default:
				p.Wide = append(p.Wide, Write{Bucket: e.GetBucket(), Key: e.GetKey(), Value: e.GetValue()})
				if e.GetBucket() == backupfile.BucketSecrets {
					secrets = append(secrets, e) // for the key check only
				}
			}
			continue
		case k.Kind == keys.KindProvider:
			p.Dropped = append(p.Dropped, where+": a running provider's announcement (its lease), not state")
			continue
		case k.Kind == keys.KindBackup:
			p.Dropped = append(p.Dropped, where+": the backup service's own record")
			continue
		case !slices.Contains(inFile, c):
			p.Dropped = append(p.Dropped, where+": cluster "+c+" has no desired record in the backup (a leftover)")
			continue
		case !wanted[c] || plans[c] == nil:
			continue // not asked for, or a conflict
		case k.Machine() && !machines[c][k.Name]:
			p.Dropped = append(p.Dropped, where+": machine "+k.Name+" has no desired record in the backup (its deletion completed as the backup was read)")
			continue
		}
		switch {
		case e.GetBucket() == backupfile.BucketSecrets:
			secrets = append(secrets, e)
		case e.GetBucket() == backupfile.BucketDesired:
			desired = append(desired, e)
		case k.Kind == keys.KindInfra:
			a, why := adoptionOf(k, e)
			if a == nil {
				p.Dropped = append(p.Dropped, where+": "+why)
				continue
			}
			plans[c].Adopt = append(plans[c].Adopt, *a)
			if a.Record != nil {
				adopted[keys.Machine(c, k.Name)] = a.Record.GetProviderId()
			}
		case k.Kind == keys.KindMachine:
			statuses = append(statuses, e)
		default:
			others = append(others, e)
		}
	}

	// Keys: every secret restored must open here.
	ids := map[string]bool{}
	for _, e := range secrets {
		if id, err := seal.KeyID(e.GetValue()); err == nil {
			ids[id] = true
		}
	}
	if o.KeyIDs != nil {
		p.KeysChecked = true
		var missing []string
		for id := range ids {
			if !slices.Contains(o.KeyIDs, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return Plan{}, refuse(CodeKeys, fmt.Sprintf("the backup's secrets are sealed with key %s, which this deployment does not hold (it holds %s): start it with the backup's key (CAPN_SECRETS_KEY, --secrets-key-file) or add it as an old key (--secrets-old-key-files)",
				strings.Join(missing, ", "), listOrNone(o.KeyIDs)))
		}
	}

	if len(wideConflicts) > 0 {
		p.Conflicts = append(p.Conflicts, &capnv1.RestoreConflict{Keys: first(wideConflicts, maxConflictKeys),
			Message: fmt.Sprintf("the deployment already holds %d deployment-wide records (add-on sets, add-on secrets) of the backup: left alone", len(wideConflicts))})
	}
	add := func(e *capnv1.BackupEntry, value []byte) {
		c := keys.ClusterOf(e.GetKey())
		plans[c].Writes = append(plans[c].Writes, Write{Bucket: e.GetBucket(), Key: e.GetKey(), Value: value})
	}
	for _, e := range secrets {
		if k, _ := keys.Parse(e.GetKey()); !deploymentWide(k) {
			add(e, e.GetValue())
		}
	}
	for _, e := range statuses {
		st := &capnv1.MachineStatus{}
		if err := proto.Unmarshal(e.GetValue(), st); err != nil {
			return Plan{}, refuse(CodeInvalid, fmt.Sprintf("%s/%s: %v", e.GetBucket(), e.GetKey(), err))
		}
		st.Adoption = &capnv1.Adoption{ProviderId: adopted[e.GetKey()], Since: timestamppb.New(o.Now), Source: o.Source}
		add(e, mustEncode(st))
	}
	for _, e := range others {
		value := e.GetValue()
		if k, _ := keys.Parse(e.GetKey()); k.Kind == keys.KindNode {
			n := &capnv1.NodeHealth{}
			if err := proto.Unmarshal(value, n); err != nil {
				return Plan{}, refuse(CodeInvalid, fmt.Sprintf("%s/%s: %v", e.GetBucket(), e.GetKey(), err))
			}
			if n.GetReady() && n.GetLastHeartbeat() != nil {
				n.LastHeartbeat = timestamppb.New(o.Now)
				value = mustEncode(n)
			}
		}
		add(e, value)
	}
	for _, e := range desired {
		k, _ := keys.Parse(e.GetKey())
		if k.Kind == keys.KindCluster {
			plans[k.Cluster].Cluster = Write{Bucket: e.GetBucket(), Key: e.GetKey(), Value: e.GetValue()}
			continue
		}
		add(e, e.GetValue())
	}
	for _, c := range want {
		if cp := plans[c]; cp != nil {
			p.Clusters = append(p.Clusters, *cp)
		}
	}
	return p, nil
}

// deploymentWide reports whether k is a record of the whole deployment
// (an add-on set, an add-on secret): state that belongs to no cluster,
// unlike a provider's lease or the backup service's own record.
func deploymentWide(k keys.Key) bool {
	return k.Cluster == "" && k.Kind != keys.KindProvider && k.Kind != keys.KindBackup
}

// adoptionOf is the adopt an infra record asks for, or why there is none.
func adoptionOf(k keys.Key, e *capnv1.BackupEntry) (*Adopt, string) {
	a := &Adopt{Provider: k.Provider, Cluster: k.Cluster, Machine: k.Name, Key: e.GetKey()}
	if k.Name == keys.ClusterObject {
		ic := &capnv1.InfraCluster{}
		if err := proto.Unmarshal(e.GetValue(), ic); err != nil {
			return nil, err.Error()
		}
		a.ClusterRecord = ic
		return a, ""
	}
	im := &capnv1.InfraMachine{}
	if err := proto.Unmarshal(e.GetValue(), im); err != nil {
		return nil, err.Error()
	}
	switch im.GetStateValue() {
	case capnv1.InfraCreating, capnv1.InfraRunning, capnv1.InfraStopped:
	default:
		return nil, "infrastructure " + im.GetState() + ": nothing to adopt (the machine goes on as one whose infrastructure is gone)"
	}
	if im.GetProviderId() == "" {
		return nil, "infrastructure without a provider id: nothing to adopt it by"
	}
	a.Record = im
	return a, ""
}

func mustEncode(m proto.Message) []byte {
	b, err := store.Encode(m)
	if err != nil {
		panic(err) // a message just decoded always encodes
	}
	return b
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(slices.Clone(s[:n]), fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
