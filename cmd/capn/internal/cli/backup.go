package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

const backupHelp = `
Takes a backup of the management plane — every cluster's desired state,
machine records, status and sealed secrets, each bucket read at one
point — and writes it to FILE (mode 0600). The secrets stay sealed: the
key that opens them is not in the file; keep it (capn dev: the data
dir's secrets.key) apart from the backups. It needs a token with the
secrets scope.

  capn backup -o FILE [--cluster NAME]...   take a backup (of the named clusters only)
  capn backup list                          the stored backups and the schedule's state
  capn backup get NAME -o FILE              download a stored backup

The backup service keeps the newest backups (capn dev --backup-keep) and
takes scheduled ones (--backup-every); capn restore puts one back.

Examples:
  capn backup -o capn.backup
  capn backup -o demo.backup --cluster demo
  capn backup list
`

func cmdBackup(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn backup -o FILE [--cluster NAME]... | list | get NAME -o FILE", backupHelp)
	var a apiFlags
	a.bind(fs)
	var out string
	var clusters stringList
	fs.StringVar(&out, "o", "", "write the backup to this `file` (mode 0600)")
	fs.StringVar(&out, "output", "", "`file`: same as -o")
	fs.Var(&clusters, "cluster", "back up only this `cluster` (repeatable)")
	const name = "capn backup"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	verb := ""
	if len(pos) > 0 {
		verb, pos = pos[0], pos[1:]
	}
	switch {
	case verb == "list" && len(pos) == 0 && out == "" && len(clusters) == 0:
	case verb == "get" && len(pos) == 1 && out != "" && len(clusters) == 0:
	case verb == "" && out != "":
	case verb == "":
		return reportError(e.stderr, name, nil, usageError{"-o FILE is required: where to write the backup"})
	default:
		return reportError(e.stderr, name, nil, usageError{fmt.Sprintf("unexpected %q: want -o FILE, list, or get NAME -o FILE", strings.Join(append([]string{verb}, pos...), " "))})
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	switch verb {
	case "list":
		return listBackups(ctx, s)
	case "get":
		body, err := s.c.DownloadBackup(ctx, pos[0])
		if err != nil {
			return s.fail(err)
		}
		return writeBackup(s, body, pos[0], out)
	}
	body, backup, err := s.c.Backup(ctx, clusters, "")
	if err != nil {
		return s.fail(err)
	}
	return writeBackup(s, body, backup, out)
}

// writeBackup writes a backup file to out (0600, atomically) and says what
// it holds.
func writeBackup(s *session, body io.ReadCloser, name, out string) int {
	data, err := io.ReadAll(body)
	_ = body.Close()
	if err != nil {
		return s.fail(err)
	}
	f, err := backupfile.Decode(data)
	if err != nil {
		return s.fail(fmt.Errorf("the gateway sent a damaged backup: %w", err))
	}
	if err := clientconfig.WriteAtomic(out, data, 0o600); err != nil {
		return s.fail(err)
	}
	m := f.Manifest
	fmt.Fprintf(s.e.stderr, "wrote backup %s to %s: %d clusters, %d entries, %d bytes, sha256 %s\n",
		name, out, len(m.GetClusters()), m.GetEntries(), len(data), m.GetSha256())
	if ids := m.GetSealKeyIds(); len(ids) > 0 {
		fmt.Fprintf(s.e.stderr, "its secrets are sealed with key %s: a restore needs that key\n", strings.Join(ids, ", "))
	}
	return daemon.ExitOK
}

func listBackups(ctx context.Context, s *session) int {
	l, err := s.c.Backups(ctx)
	if err != nil {
		return s.fail(err)
	}
	tw := tabwriter.NewWriter(s.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tTRIGGER\tCLUSTERS\tENTRIES\tBYTES")
	for _, b := range l.Items {
		clusters := fmt.Sprint(len(b.Clusters))
		if b.Partial {
			clusters = strings.Join(b.Clusters, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", b.Name, b.Created.Local().Format(time.DateTime), b.Trigger, clusters, b.Entries, b.Bytes)
	}
	_ = tw.Flush()
	if len(l.Schedule) > 0 {
		var sch api.BackupSchedule
		if err := json.Unmarshal(l.Schedule, &sch); err == nil {
			line := "schedule: every " + sch.Every
			if sch.Keep > 0 {
				line += fmt.Sprintf(", keep %d", sch.Keep)
			}
			if sch.LastSuccess != nil {
				line += ", last success " + sch.LastSuccess.Local().Format(time.DateTime)
			}
			if sch.Next != nil {
				line += ", next " + sch.Next.Local().Format(time.DateTime)
			}
			fmt.Fprintln(s.e.stdout, line)
			for _, c := range sch.Conditions {
				if c.Status != "True" {
					fmt.Fprintf(s.e.stdout, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
				}
			}
		}
	}
	return daemon.ExitOK
}

const restoreHelp = `
Restores a backup (capn backup -o FILE) into the deployment the gateway
serves. Into an empty deployment everything comes back: every cluster,
machine record and secret; the providers adopt the machines the backup
recorded (by provider id) instead of creating them, and the services go
on where the backup left off. A deployment that holds any cluster is
refused unless --merge, which restores the clusters it does not have and
reports the others as conflicts, leaving them alone.

The deployment must hold the key the backup's secrets are sealed with
(as its key, or an old key); a damaged file is refused, saying what is
wrong, and nothing is written. It needs a token with the secrets and
write scopes.

Examples:
  capn restore capn.backup
  capn restore capn.backup --dry-run
  capn restore capn.backup --merge --cluster demo
`

func cmdRestore(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn restore FILE [--merge] [--dry-run] [--cluster NAME]...", restoreHelp)
	var a apiFlags
	a.bind(fs)
	var o client.RestoreOptions
	var clusters stringList
	fs.BoolVar(&o.Merge, "merge", false, "restore into a deployment that has clusters: only the clusters it does not have")
	fs.BoolVar(&o.DryRun, "dry-run", false, "check the file and say what would be restored, writing nothing")
	fs.Var(&clusters, "cluster", "restore only this `cluster` (repeatable)")
	fs.DurationVar(&o.AdoptWait, "adopt-wait", 30*time.Second, "how long to wait for the providers to adopt the machines before answering")
	const name = "capn restore"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) != 1 {
		return reportError(e.stderr, name, nil, usageError{"one FILE: the backup to restore"})
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	// A damaged file is refused here, saying what is wrong, before it is
	// sent anywhere.
	f, err := backupfile.Decode(data)
	if err == nil {
		err = f.Check()
	}
	var inv *backupfile.InvalidError
	if errors.As(err, &inv) {
		fmt.Fprintf(e.stderr, "%s: %s is not a valid backup: nothing was sent\n", name, pos[0])
		for _, p := range inv.Problems {
			fmt.Fprintf(e.stderr, "  %s\n", p)
		}
		return daemon.ExitFailed
	}
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	o.Clusters = clusters
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	r, err := s.c.Restore(ctx, data, o)
	if err != nil {
		return s.fail(err)
	}
	printRestore(e.stdout, r)
	if len(r.GetWaiting()) > 0 && !r.GetDryRun() {
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}

// printRestore says what a restore did (or would do).
func printRestore(w io.Writer, r *capnv1.RestoreReport) {
	verb := "restored"
	if r.GetDryRun() {
		verb = "would restore"
	}
	m := r.GetManifest()
	fmt.Fprintf(w, "backup %s (%s, capn %s)\n", m.GetName(), m.GetCreated().AsTime().Local().Format(time.DateTime), m.GetCapnVersion())
	fmt.Fprintf(w, "%s %d clusters: %s\n", verb, len(r.GetRestored()), strings.Join(r.GetRestored(), ", "))
	if wr := r.GetWritten(); len(wr) > 0 {
		fmt.Fprintf(w, "  keys: desired %d, observed %d, secrets %d\n", wr["desired"], wr["observed"], wr["secrets"])
	}
	if !r.GetDryRun() {
		fmt.Fprintf(w, "  adopted by their providers: %d of %d\n", r.GetAdopted(), r.GetAdoptions())
	} else {
		fmt.Fprintf(w, "  to hand to their providers: %d\n", r.GetAdoptions())
	}
	for _, c := range r.GetConflicts() {
		fmt.Fprintf(w, "conflict: %s: %s (%s)\n", c.GetCluster(), c.GetMessage(), strings.Join(c.GetKeys(), ", "))
	}
	for _, x := range r.GetWaiting() {
		fmt.Fprintf(w, "not adopted yet: %s (held until its provider adopts it)\n", x)
	}
	if n := len(r.GetDropped()); n > 0 {
		fmt.Fprintf(w, "left out: %d records\n", n)
		for _, d := range r.GetDropped() {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	if !r.GetKeysChecked() && !r.GetDryRun() {
		fmt.Fprintln(w, "warning: the gateway holds no secrets key, so the secrets' key was not checked")
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
