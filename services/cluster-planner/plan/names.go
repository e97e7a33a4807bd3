package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Machine names
//
// A machine is named after its slot:
//
//	<cluster>-<pool>-<hash[:5]>-<ordinal>      e.g. demo-md-0-3f9a1-2, demo-control-plane-77c0e-0
//
// where hash is the pool's TemplateHash and ordinal the lowest number whose
// name no machine record of the cluster holds (including records still being
// deleted, and names this plan already used). Two planners looking at the
// same state compute the same name for the same slot, so the CAS create of
// the second one fails instead of making a duplicate machine. A new template
// starts again from ordinal 0 under its new hash; a deleted machine's name is
// reused only after its record is removed.
//
// Names are DNS-1123 labels (they become hostnames): when
// <cluster>-<pool> is too long for 63 characters it is cut and suffixed with
// five hex digits of its own hash, which keeps it unique.

// hashLen is the length of a TemplateHash; nameHashLen how much of it names use.
const (
	hashLen     = 10
	nameHashLen = 5
	maxNameLen  = 63
)

// TemplateHash is a short, stable hash of everything that makes a machine
// what it is and so rolls it when changed: role, provider, version, the
// operating system, the template's parameters and failure domain, and the
// effective bootstrap settings except the token TTL. Labels, taints and stopped are not in it:
// they are updated in place. The encoding is written out field by field
// (not a protobuf marshal), so the hash does not change with a protobuf
// library release and upgrading capn rolls no machine. Fields added later
// (os, bootstrap format and command timeout) are written only when they
// are not their default, so a machine made before them keeps its hash.
func TemplateHash(role, provider, version, os string, t *capnv1.MachineTemplate, b *capnv1.BootstrapSpec) string {
	h := sha256.New()
	w := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	wmap := func(m map[string]string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w(strconv.Itoa(len(keys)))
		for _, k := range keys {
			w(k)
			w(m[k])
		}
	}
	wlist := func(l []string) {
		w(strconv.Itoa(len(l)))
		for _, s := range l {
			w(s)
		}
	}
	w("capn-template-v1")
	w(role)
	w(provider)
	w(version)
	w(t.GetFailureDomain())
	wmap(t.GetParameters())
	w(b.GetProvider())
	w(strconv.Itoa(len(b.GetFiles())))
	for _, f := range b.GetFiles() {
		w(f.GetPath())
		w(f.GetContent())
		w(f.GetOwner())
		w(f.GetPermissions())
		if r := f.GetSecretRef(); r != nil {
			// Only when set: files without one hash as before.
			w("secretRef")
			w(r.GetName())
			w(r.GetKey())
		}
	}
	wlist(b.GetPreCommands())
	wlist(b.GetPostCommands())
	wmap(b.GetKubeletExtraArgs())
	w(b.GetUserData())
	w(b.GetCa().GetCertificatePem())
	w(b.GetCa().GetPrivateKeyPem())
	if os != "" && os != manifest.OSLinux {
		w("os")
		w(os)
	}
	if f := b.GetFormat(); f != "" {
		w("format")
		w(f)
	}
	if d := b.GetCommandTimeout(); d != nil {
		w("commandTimeout")
		w(d.AsDuration().String())
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

// MachineName is the name of slot ordinal of a pool with template hash hash.
func MachineName(cluster, pool, hash string, ordinal int) string {
	if len(hash) > nameHashLen {
		hash = hash[:nameHashLen]
	}
	prefix := cluster + "-" + pool
	suffix := "-" + hash + "-" + strconv.Itoa(ordinal)
	if len(prefix)+len(suffix) > maxNameLen {
		sum := sha256.Sum256([]byte(prefix))
		keep := max(1, maxNameLen-len(suffix)-1-nameHashLen)
		prefix = strings.TrimRight(prefix[:min(keep, len(prefix))], "-") + "-" + hex.EncodeToString(sum[:])[:nameHashLen]
	}
	return prefix + suffix
}

// freeName is the pool's next machine name: the lowest free ordinal. The
// search resumes where the last one ended (the ordinals below are taken,
// and a plan only takes more), so naming k new machines in a pool that
// holds n makes at most n+k names: linear, not k·n.
func (p *planner) freeName(pl *pool) string {
	for ; ; pl.next++ {
		if name := MachineName(p.name, pl.name, pl.hash, pl.next); !p.taken[name] {
			pl.next++
			return name
		}
	}
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
