// Package backupfile reads and writes capn's backup files: the shared
// format of the backup service, the gateway and the CLI.
//
//	capn-backup/1                                  the format line
//	{"format":"capn-backup/1","name":…,"sha256":…} the manifest: one line of JSON
//	<varint length><BackupEntry> …                 the entries, protobuf
//
// The manifest (capnv1.BackupManifest) counts the entries and their bytes
// and holds the SHA-256 of everything after its line, so a file cut short
// or changed is refused, with what is wrong, before anything reads its
// entries. Check then holds every entry to its key: a known bucket, a key
// capn makes, a value that decodes as the record that key holds (sealed
// secrets: a sealed value, whose key id the manifest lists).
package backupfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// Format is the first line of a backup file and the manifest's format.
const Format = "capn-backup/1"

// Schema is the protobuf package of the values.
const Schema = "capn.v1alpha1"

// MediaType is a backup file's HTTP content type.
const MediaType = "application/vnd.capn.backup"

// The buckets a backup holds, in the order they are read: the reverse of
// the order writes flow (desired → secrets → observed), so that a record
// is never read without the records it was written in reaction to.
const (
	BucketObserved = "observed"
	BucketSecrets  = "secrets"
	BucketDesired  = "desired"
)

// Buckets are the buckets of a backup, in reading order.
var Buckets = []string{BucketObserved, BucketSecrets, BucketDesired}

// ErrInvalid is matched by every error about a file's contents.
var ErrInvalid = errors.New("invalid backup file")

// InvalidError lists everything wrong with a file, one line each.
type InvalidError struct{ Problems []string }

func (e *InvalidError) Error() string {
	if len(e.Problems) == 1 {
		return ErrInvalid.Error() + ": " + e.Problems[0]
	}
	return fmt.Sprintf("%s: %d problems: %s", ErrInvalid, len(e.Problems), strings.Join(e.Problems, "; "))
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &InvalidError{Problems: []string{fmt.Sprintf(format, args...)}}
}

// File is a backup read back: its manifest and entries.
type File struct {
	Manifest *capnv1.BackupManifest
	Entries  []*capnv1.BackupEntry
}

// Encode makes the file of m and entries. It fills m's format, schema,
// counts, per-bucket keys and bytes, seal key ids and sha256 (m is
// modified); the rest of m is the caller's.
func Encode(m *capnv1.BackupManifest, entries []*capnv1.BackupEntry) ([]byte, error) {
	var body bytes.Buffer
	perBucket := map[string]*capnv1.BackupBucket{}
	for _, b := range m.GetBuckets() {
		b.Keys, b.Bytes = 0, 0
		perBucket[b.GetName()] = b
	}
	ids := map[string]bool{}
	for _, e := range entries {
		if _, err := protodelim.MarshalTo(&body, e); err != nil {
			return nil, fmt.Errorf("encode %s/%s: %w", e.GetBucket(), e.GetKey(), err)
		}
		b := perBucket[e.GetBucket()]
		if b == nil {
			return nil, fmt.Errorf("encode %s/%s: bucket %q is not in the manifest", e.GetBucket(), e.GetKey(), e.GetBucket())
		}
		b.Keys++
		b.Bytes += uint64(len(e.GetValue()))
		if e.GetBucket() == BucketSecrets {
			if id, err := seal.KeyID(e.GetValue()); err == nil {
				ids[id] = true
			}
		}
	}
	m.Format, m.Schema = Format, Schema
	m.Entries, m.EntriesBytes = uint64(len(entries)), uint64(body.Len())
	sum := sha256.Sum256(body.Bytes())
	m.Sha256 = hex.EncodeToString(sum[:])
	m.SealKeyIds = nil
	for id := range ids {
		m.SealKeyIds = append(m.SealKeyIds, id)
	}
	slices.Sort(m.SealKeyIds)
	line, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode the manifest: %w", err)
	}
	out := make([]byte, 0, len(Format)+len(line)+2+body.Len())
	out = append(out, Format+"\n"...)
	out = append(out, line...)
	out = append(out, '\n')
	return append(out, body.Bytes()...), nil
}

// ReadManifest reads a file's first two lines: the format and the
// manifest. It is what a listing shows without reading the entries.
func ReadManifest(r io.Reader) (*capnv1.BackupManifest, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	m, _, err := readHead(br)
	return m, err
}

// readHead reads the format line and the manifest, returning the bytes
// they took.
func readHead(br *bufio.Reader) (*capnv1.BackupManifest, int, error) {
	first, err := br.ReadString('\n')
	if err != nil && (err != io.EOF || first == "") {
		if err == io.EOF {
			return nil, 0, invalid("the file is empty")
		}
		return nil, 0, fmt.Errorf("read the format line: %w", err)
	}
	if strings.TrimSuffix(first, "\n") != Format {
		shown := first
		if len(shown) > 40 {
			shown = shown[:40] + "…"
		}
		return nil, 0, invalid("line 1 is %q, want %q: not a capn backup (or one of a format this capn does not read)", strings.TrimSpace(shown), Format)
	}
	line, err := br.ReadBytes('\n')
	if err == io.EOF {
		return nil, 0, invalid("truncated: the file ends inside the manifest (line 2)")
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the manifest: %w", err)
	}
	m := &capnv1.BackupManifest{}
	if err := protojson.Unmarshal(line, m); err != nil {
		return nil, 0, invalid("line 2 (the manifest) is not a manifest: %v", err)
	}
	if m.GetFormat() != Format {
		return nil, 0, invalid("the manifest's format is %q, want %q", m.GetFormat(), Format)
	}
	if m.GetSchema() != Schema {
		return nil, 0, invalid("the manifest's schema is %q, want %q", m.GetSchema(), Schema)
	}
	return m, len(first) + len(line), nil
}

// Decode reads a whole file and verifies it against its manifest: the
// entries' bytes and count and their SHA-256. It does not look inside the
// entries: Check does.
func Decode(data []byte) (*File, error) {
	br := bufio.NewReader(bytes.NewReader(data))
	m, head, err := readHead(br)
	if err != nil {
		return nil, err
	}
	body := data[head:]
	if uint64(len(body)) != m.GetEntriesBytes() {
		what := "truncated"
		if uint64(len(body)) > m.GetEntriesBytes() {
			what = "corrupted"
		}
		return nil, invalid("%s: the manifest counts %d bytes of entries (%d entries), the file holds %d", what, m.GetEntriesBytes(), m.GetEntries(), len(body))
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); got != m.GetSha256() {
		return nil, invalid("corrupted: the entries' SHA-256 is %s, the manifest says %s", got, m.GetSha256())
	}
	f := &File{Manifest: m}
	rd := bufio.NewReader(bytes.NewReader(body))
	for {
		e := &capnv1.BackupEntry{}
		err := protodelim.UnmarshalFrom(rd, e)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, invalid("entry %d does not decode: %v", len(f.Entries)+1, err)
		}
		f.Entries = append(f.Entries, e)
	}
	if uint64(len(f.Entries)) != m.GetEntries() {
		return nil, invalid("the manifest counts %d entries, the file holds %d", m.GetEntries(), len(f.Entries))
	}
	return f, nil
}

// maxProblems bounds the problems Check lists.
const maxProblems = 20

// Check holds every entry to its key and the file to its manifest: a
// bucket the manifest lists, a key of the shape capn makes for that
// bucket, each key once, a value that decodes as that key's record (a
// sealed value in secrets, sealed with a key the manifest lists), the
// per-bucket counts, and the clusters: one desired cluster record for
// each cluster the manifest names. Every problem is reported, at most 20.
func (f *File) Check() error {
	var problems []string
	add := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	buckets := map[string]*capnv1.BackupBucket{}
	for _, b := range f.Manifest.GetBuckets() {
		if !slices.Contains(Buckets, b.GetName()) {
			add("the manifest lists bucket %q (want one of %s)", b.GetName(), strings.Join(Buckets, ", "))
		}
		buckets[b.GetName()] = b
	}
	counts := map[string]uint64{}
	seen := map[string]bool{}
	ids := map[string]bool{}
	clusters := map[string]bool{}
	for i, e := range f.Entries {
		where := fmt.Sprintf("entry %d (%s/%s)", i+1, e.GetBucket(), e.GetKey())
		if buckets[e.GetBucket()] == nil {
			add("%s: bucket %q is not in the manifest", where, e.GetBucket())
			continue
		}
		counts[e.GetBucket()]++
		if id := e.GetBucket() + "/" + e.GetKey(); seen[id] {
			add("%s: the key appears twice", where)
		} else {
			seen[id] = true
		}
		k, err := keys.Parse(e.GetKey())
		if err != nil {
			add("%s: %v", where, err)
			continue
		}
		if e.GetBucket() == BucketSecrets {
			id, err := seal.KeyID(e.GetValue())
			if err != nil {
				add("%s: not a sealed value: %v", where, err)
				continue
			}
			ids[id] = true
		}
		newT, ok := Record(e.GetBucket(), k)
		if !ok {
			add("%s: bucket %s holds no %s keys", where, e.GetBucket(), k.Kind)
			continue
		}
		if newT != nil {
			if err := proto.Unmarshal(e.GetValue(), newT()); err != nil {
				add("%s: the value does not decode as %s: %v", where, newT().ProtoReflect().Descriptor().Name(), err)
			}
		}
		if e.GetBucket() == BucketDesired && k.Kind == keys.KindCluster {
			clusters[k.Cluster] = true
		}
	}
	for _, b := range f.Manifest.GetBuckets() {
		if counts[b.GetName()] != b.GetKeys() {
			add("bucket %s: the manifest counts %d keys, the file holds %d", b.GetName(), b.GetKeys(), counts[b.GetName()])
		}
	}
	for id := range ids {
		if !slices.Contains(f.Manifest.GetSealKeyIds(), id) {
			add("secrets sealed with key %s, which the manifest does not list", id)
		}
	}
	for _, c := range f.Manifest.GetClusters() {
		if !clusters[c] {
			add("the manifest names cluster %s, the file has no desired record of it", c)
		}
	}
	for c := range clusters {
		if !slices.Contains(f.Manifest.GetClusters(), c) {
			add("the file holds cluster %s, which the manifest does not name", c)
		}
	}
	if len(problems) > 0 {
		return &InvalidError{Problems: problems}
	}
	return nil
}

// Record is the constructor of the record key k holds in bucket: ok is
// false for a key the bucket does not hold; a nil constructor with ok
// true is a sealed value (secrets), which only a key opens.
func Record(bucket string, k keys.Key) (func() proto.Message, bool) {
	msg := func(m proto.Message) func() proto.Message {
		return func() proto.Message { return m.ProtoReflect().New().Interface() }
	}
	switch bucket {
	case BucketDesired:
		switch k.Kind {
		case keys.KindCluster:
			return msg(&capnv1.Cluster{}), true
		case keys.KindMachine:
			return msg(&capnv1.Machine{}), true
		case keys.KindAddonSet:
			return msg(&capnv1.AddonSet{}), true
		case keys.KindClass, keys.KindClassRev:
			return msg(&capnv1.ClusterClass{}), true
		case keys.KindRollout:
			return msg(&capnv1.Rollout{}), true
		case keys.KindK8sVersions:
			return msg(&capnv1.KubernetesVersions{}), true
		}
	case BucketObserved:
		switch k.Kind {
		case keys.KindCluster:
			return msg(&capnv1.ClusterStatus{}), true
		case keys.KindMachine:
			return msg(&capnv1.MachineStatus{}), true
		case keys.KindInfra:
			if k.Name == keys.ClusterObject {
				return msg(&capnv1.InfraCluster{}), true
			}
			return msg(&capnv1.InfraMachine{}), true
		case keys.KindNode:
			return msg(&capnv1.NodeHealth{}), true
		case keys.KindRemediation:
			return msg(&capnv1.RemediationStatus{}), true
		case keys.KindAutoscaler:
			return msg(&capnv1.AutoscalerStatus{}), true
		case keys.KindProvider:
			return msg(&capnv1.ProviderAnnouncement{}), true
		case keys.KindSecrets:
			return msg(&capnv1.ClusterSecretsStatus{}), true
		case keys.KindBackup:
			return msg(&capnv1.BackupScheduleStatus{}), true
		case keys.KindAddon:
			return msg(&capnv1.ClusterAddonStatus{}), true
		case keys.KindRollout:
			return msg(&capnv1.RolloutStatus{}), true
		case keys.KindMaintenance:
			return msg(&capnv1.MaintenanceRecord{}), true
		case keys.KindControlPlane:
			return msg(&capnv1.ControlPlaneRecord{}), true
		}
	case BucketSecrets:
		switch k.Kind {
		case keys.KindPKI, keys.KindKubeconfig, keys.KindBootstrap, keys.KindAddonSecret, keys.KindBootstrapSecret, keys.KindExternalKubeconfig:
			return nil, true
		}
	}
	return nil, false
}
