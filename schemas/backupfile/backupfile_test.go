package backupfile_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/seal"
)

func encode(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sample is a small valid backup of cluster c1: its desired cluster and
// machine, their statuses and infrastructure, and a sealed kubeconfig.
func sample(t testing.TB) (*capnv1.BackupManifest, []*capnv1.BackupEntry, string) {
	t.Helper()
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := ring.Seal("kubeconfig.c1", encode(t, &capnv1.AdminKubeconfig{Kubeconfig: []byte("apiVersion: v1")}))
	if err != nil {
		t.Fatal(err)
	}
	m := &capnv1.BackupManifest{Name: "20250102T030405Z-api", Created: timestamppb.Now(), Trigger: "api", Clusters: []string{"c1"},
		Buckets: []*capnv1.BackupBucket{{Name: "observed", Sequence: 9}, {Name: "secrets", Sequence: 2}, {Name: "desired", Sequence: 4}}}
	entries := []*capnv1.BackupEntry{
		{Bucket: "observed", Key: "cluster.c1", Value: encode(t, &capnv1.ClusterStatus{Phase: "Ready"}), Revision: 7},
		{Bucket: "observed", Key: "machine.c1.m1", Value: encode(t, &capnv1.MachineStatus{Phase: "Running", ProviderId: "sim://c1/m1"}), Revision: 8},
		{Bucket: "observed", Key: "infra.sim.c1.m1", Value: encode(t, &capnv1.InfraMachine{Provider: "sim", Cluster: "c1", Machine: "m1", ProviderId: "sim://c1/m1", State: "Running"}), Revision: 9},
		{Bucket: "observed", Key: "infra.sim.c1._", Value: encode(t, &capnv1.InfraCluster{Provider: "sim", Cluster: "c1", Ready: true}), Revision: 6},
		{Bucket: "secrets", Key: "kubeconfig.c1", Value: sealed, Revision: 2},
		{Bucket: "desired", Key: "cluster.c1", Value: encode(t, &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1", Uid: "u1"}}), Revision: 3},
		{Bucket: "desired", Key: "machine.c1.m1", Value: encode(t, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "m1"}}), Revision: 4},
	}
	return m, entries, key.ID()
}

func TestRoundTrip(t *testing.T) {
	m, entries, keyID := sample(t)
	data, err := backupfile.Encode(m, entries)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("capn-backup/1\n{")) {
		t.Fatalf("file starts %q", data[:20])
	}
	f, err := backupfile.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.Manifest, m) || len(f.Entries) != len(entries) {
		t.Fatalf("manifest\n got %v\nwant %v", f.Manifest, m)
	}
	for i := range entries {
		if !proto.Equal(f.Entries[i], entries[i]) {
			t.Errorf("entry %d: got %v, want %v", i, f.Entries[i], entries[i])
		}
	}
	want := map[string]uint64{"observed": 4, "secrets": 1, "desired": 2}
	for _, b := range f.Manifest.GetBuckets() {
		if b.GetKeys() != want[b.GetName()] || b.GetBytes() == 0 {
			t.Errorf("bucket %s: %d keys, %d bytes", b.GetName(), b.GetKeys(), b.GetBytes())
		}
	}
	if ids := f.Manifest.GetSealKeyIds(); len(ids) != 1 || ids[0] != keyID {
		t.Errorf("seal key ids %v, want [%s]", ids, keyID)
	}
	if f.Manifest.GetEntries() != 7 || f.Manifest.GetFormat() != backupfile.Format || len(f.Manifest.GetSha256()) != 64 {
		t.Errorf("manifest %v", f.Manifest)
	}
	head, err := backupfile.ReadManifest(bytes.NewReader(data))
	if err != nil || head.GetSha256() != m.GetSha256() {
		t.Errorf("ReadManifest: %v, %v", head, err)
	}
}

// Every damage is refused with what is wrong, before any entry is used.
func TestDecodeRefusesDamagedFiles(t *testing.T) {
	m, entries, _ := sample(t)
	data, err := backupfile.Encode(m, entries)
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.IndexByte(data[len(backupfile.Format)+1:], '\n') + len(backupfile.Format) + 2
	flip := func(i int) []byte {
		d := bytes.Clone(data)
		d[i] ^= 0x40
		return d
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "the file is empty"},
		{"not a backup", []byte("apiVersion: v1\nkind: Cluster\n"), `line 1 is "apiVersion: v1", want "capn-backup/1"`},
		{"a newer format", []byte("capn-backup/2\n{}\n"), "not a capn backup (or one of a format this capn does not read)"},
		{"cut in the manifest", data[:head-10], "truncated: the file ends inside the manifest"},
		{"manifest garbled", append(append([]byte("capn-backup/1\n"), "{not json\n"...), data[head:]...), "line 2 (the manifest) is not a manifest"},
		{"cut after the manifest", data[:head], "truncated: the manifest counts"},
		{"cut in the entries", data[:len(data)-5], "truncated: the manifest counts"},
		{"bytes appended", append(bytes.Clone(data), 0, 1), "corrupted: the manifest counts"},
		{"a flipped byte in the entries", flip(len(data) - 3), "corrupted: the entries' SHA-256 is"},
		{"a flipped byte in the first entry", flip(head + 3), "corrupted: the entries' SHA-256 is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := backupfile.Decode(tt.data)
			if !errors.Is(err, backupfile.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, %v; want an invalid-file error saying %q", f, err, tt.want)
			}
		})
	}
}

// Check names every entry that is not what its key says it is.
func TestCheckNamesEveryBadEntry(t *testing.T) {
	m, entries, _ := sample(t)
	entries = append(entries,
		&capnv1.BackupEntry{Bucket: "desired", Key: "node.c1.m1", Value: []byte{}},
		&capnv1.BackupEntry{Bucket: "observed", Key: "machine.c1.m2", Value: []byte{0xff, 0xff, 0xff}},
		&capnv1.BackupEntry{Bucket: "observed", Key: "not a key", Value: nil},
		&capnv1.BackupEntry{Bucket: "secrets", Key: "pki.c1", Value: []byte("plain text")},
		&capnv1.BackupEntry{Bucket: "desired", Key: "cluster.c2", Value: encode(t, &capnv1.Cluster{})},
		&capnv1.BackupEntry{Bucket: "desired", Key: "machine.c1.m1", Value: encode(t, &capnv1.Machine{})},
	)
	m.Clusters = append(m.Clusters, "c3")
	data, err := backupfile.Encode(m, entries)
	if err != nil {
		t.Fatal(err)
	}
	f, err := backupfile.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Check()
	var inv *backupfile.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("Check = %v", err)
	}
	for _, want := range []string{
		"entry 8 (desired/node.c1.m1): bucket desired holds no node keys",
		"entry 9 (observed/machine.c1.m2): the value does not decode as MachineStatus",
		`entry 10 (observed/not a key): key "not a key": malformed`,
		"entry 11 (secrets/pki.c1): not a sealed value",
		"entry 13 (desired/machine.c1.m1): the key appears twice",
		"the manifest names cluster c3, the file has no desired record of it",
		"the file holds cluster c2, which the manifest does not name",
	} {
		if !slices(inv.Problems, want) {
			t.Errorf("no problem saying %q in:\n%s", want, strings.Join(inv.Problems, "\n"))
		}
	}
}

func slices(problems []string, want string) bool {
	for _, p := range problems {
		if strings.Contains(p, want) {
			return true
		}
	}
	return false
}

// A manifest edited to hide a change does not pass either: its counts
// must match the file it heads.
func TestCheckHoldsTheCountsToTheEntries(t *testing.T) {
	m, entries, _ := sample(t)
	if _, err := backupfile.Encode(m, entries); err != nil {
		t.Fatal(err)
	}
	m.Buckets[0].Keys = 99
	f := &backupfile.File{Manifest: m, Entries: entries}
	if err := f.Check(); err == nil || !strings.Contains(err.Error(), "bucket observed: the manifest counts 99 keys, the file holds 4") {
		t.Fatalf("Check = %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	m, entries, _ := sample(f)
	data, err := backupfile.Encode(m, entries)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("capn-backup/1\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := backupfile.Decode(data)
		if err != nil {
			if !errors.Is(err, backupfile.ErrInvalid) {
				t.Fatalf("an error that is not ErrInvalid: %v", err)
			}
			return
		}
		_ = file.Check()
	})
}

// The maintenance service's records and the auto-patch catalogue are
// carried: a backup that holds them checks.
func TestMaintenanceRecordsAreCarried(t *testing.T) {
	m, entries, _ := sample(t)
	entries = append(entries,
		&capnv1.BackupEntry{Bucket: "observed", Key: "maintenance.c1", Value: encode(t, &capnv1.MaintenanceRecord{SeenTransition: timestamppb.Now()}), Revision: 5},
		&capnv1.BackupEntry{Bucket: "desired", Key: "kubernetesversions.default", Value: encode(t, &capnv1.KubernetesVersions{
			Spec: &capnv1.KubernetesVersionsSpec{Versions: []*capnv1.KubernetesVersion{{Version: "v1.34.5"}}}}), Revision: 2})
	data, err := backupfile.Encode(m, entries)
	if err != nil {
		t.Fatal(err)
	}
	f, err := backupfile.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
}
