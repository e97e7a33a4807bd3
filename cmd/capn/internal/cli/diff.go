package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

const diffHelp = `
Shows what capn apply would change, as kubectl diff does: for each
document, a unified diff of the cluster as stored against the cluster as
the gateway would store it (a server-side dry run: defaults filled in,
checked against the stored cluster, nothing written). Only what the
manifest sets is compared — metadata.name, labels and annotations, and the
spec; not the status nor the fields the gateway owns (uid, generation,
timestamps, resourceVersion). A cluster that does not exist yet is shown
as all added.

Takes the same -f as capn apply. A document the gateway refuses is
reported as by capn apply.

Exit codes: 0 no differences, 1 differences, 2 an error (a refused
document, an unreachable gateway, a usage mistake).

Examples:
  capn diff -f demo.yaml
  capn diff -f clusters/ && echo "nothing to apply"
`

// exitDiffError is diff's exit code for any error: kubectl diff's ">1".
const exitDiffError = 2

func cmdDiff(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn diff -f FILE|DIR|- [-f ...] [-R]", diffHelp)
	var a apiFlags
	a.bind(fs)
	var in inputFlags
	in.bind(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err) // 0 for -h, else 2
	}
	const name = "capn diff"
	if err := wantArgs(pos); err != nil {
		reportError(e.stderr, name, nil, err)
		return exitDiffError
	}
	docs, err := in.load(e)
	if err != nil {
		reportError(e.stderr, name, nil, err)
		return exitDiffError
	}
	s, err := a.connect(e, name)
	if err != nil {
		reportError(e.stderr, name, nil, err)
		return exitDiffError
	}
	checked, refused, err := s.checkAll(ctx, docs, true)
	switch {
	case err != nil:
		s.fail(err)
		return exitDiffError
	case refused > 0:
		fmt.Fprintf(e.stderr, "%s: %d of %s refused\n", name, refused, plural(len(docs), "document"))
		return exitDiffError
	}
	differ := false
	for _, c := range checked {
		d, err := c.diff(e.stdout)
		if err != nil {
			s.fail(err)
			return exitDiffError
		}
		differ = differ || d
	}
	if differ {
		return daemon.ExitFailed // kubectl's "differences found"
	}
	return daemon.ExitOK
}

// diff writes the unified diff of a checked document, the cluster stored
// against the cluster as it would be stored, and reports whether there is
// one.
func (c checked) diff(w io.Writer) (bool, error) {
	if c.wouldBeClass != nil {
		view := func(cc *capnv1.ClusterClass) ([]string, error) {
			if cc == nil {
				return nil, nil
			}
			b, err := manifest.EncodeMessage(&capnv1.ClusterClass{ApiVersion: cc.GetApiVersion(), Kind: cc.GetKind(),
				Metadata: &capnv1.ObjectMeta{Name: cc.GetMetadata().GetName(), Labels: cc.GetMetadata().GetLabels()}, Spec: cc.GetSpec()})
			if err != nil {
				return nil, err
			}
			return splitLines(string(b)), nil
		}
		live, err := view(c.currentClass)
		if err != nil {
			return false, err
		}
		merged, err := view(c.wouldBeClass)
		if err != nil {
			return false, err
		}
		from := c.ref() + " (stored)"
		if c.currentClass == nil {
			from = c.ref() + " (not found)"
		}
		return writeUnified(w, from, c.ref()+" (after apply)", live, merged), nil
	}
	if c.wouldBeSet != nil {
		live, err := setDiffView(c.currentSet)
		if err != nil {
			return false, err
		}
		merged, err := setDiffView(c.wouldBeSet)
		if err != nil {
			return false, err
		}
		from := c.ref() + " (stored)"
		if c.currentSet == nil {
			from = c.ref() + " (not found)"
		}
		return writeUnified(w, from, c.ref()+" (after apply)", live, merged), nil
	}
	live, err := diffView(c.current)
	if err != nil {
		return false, err
	}
	merged, err := diffView(c.wouldBe)
	if err != nil {
		return false, err
	}
	obj := "cluster/" + c.wouldBe.GetMetadata().GetName()
	from := obj + " (stored)"
	if c.current == nil {
		from = obj + " (not found)"
	}
	return writeUnified(w, from, obj+" (after apply)", live, merged), nil
}

// diffView renders what diff compares of a cluster: apiVersion, kind,
// metadata.name, labels and annotations, and the spec, as YAML lines.
// A nil cluster (not stored) is no lines.
func diffView(c *capnv1.Cluster) ([]string, error) {
	if c == nil {
		return nil, nil
	}
	md := c.GetMetadata()
	v := &capnv1.Cluster{
		ApiVersion: c.GetApiVersion(), Kind: c.GetKind(),
		Metadata: &capnv1.ObjectMeta{Name: md.GetName(), Labels: md.GetLabels(), Annotations: md.GetAnnotations()},
		Spec:     c.GetSpec(),
	}
	b, err := manifest.Encode(v)
	if err != nil {
		return nil, err
	}
	return splitLines(string(b)), nil
}

// setDiffView is diffView for an add-on set.
func setDiffView(s *capnv1.AddonSet) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	md := s.GetMetadata()
	v := &capnv1.AddonSet{
		ApiVersion: s.GetApiVersion(), Kind: s.GetKind(),
		Metadata: &capnv1.ObjectMeta{Name: md.GetName(), Labels: md.GetLabels(), Annotations: md.GetAnnotations()},
		Spec:     s.GetSpec(),
	}
	b, err := manifest.EncodeAddonSet(v)
	if err != nil {
		return nil, err
	}
	return splitLines(string(b)), nil
}

// splitLines cuts s into lines, each with its "\n" (the last one may have
// none).
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// writeUnified writes a unified diff of a and b (lines, each ending in
// "\n") with 3 lines of context, as diff -u, and reports whether they
// differ (nothing is written when they do not).
func writeUnified(w io.Writer, fromName, toName string, a, b []string) bool {
	ops := lineDiff(a, b)
	const context = 3
	// Hunks: runs of changes with up to 2*context equal lines between them.
	type span struct{ start, end int } // in ops
	var hunks []span
	for i, op := range ops {
		if op.kind == ' ' {
			continue
		}
		lo, hi := max(0, i-context), min(len(ops), i+context+1)
		if n := len(hunks); n > 0 && lo <= hunks[n-1].end {
			hunks[n-1].end = hi
		} else {
			hunks = append(hunks, span{lo, hi})
		}
	}
	if len(hunks) == 0 {
		return false
	}
	fmt.Fprintf(w, "--- %s\n+++ %s\n", fromName, toName)
	for _, h := range hunks {
		aStart, bStart, aLen, bLen := 0, 0, 0, 0
		if h.start < len(ops) {
			aStart, bStart = ops[h.start].a, ops[h.start].b
		}
		for _, op := range ops[h.start:h.end] {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, op := range ops[h.start:h.end] {
			line := op.text
			if !strings.HasSuffix(line, "\n") {
				line += "\n\\ No newline at end of file\n"
			}
			fmt.Fprintf(w, "%c%s", op.kind, line)
		}
	}
	return true
}

// hunkRange is a hunk header's "start,length" (1-based; a range of 0
// lines names the line before it, as diff -u does).
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// diffOp is one line of an edit script: ' ' kept, '-' only in a, '+'
// only in b; a and b are the indexes of the next line of each side.
type diffOp struct {
	kind rune
	text string
	a, b int
}

// lineDiff is the shortest edit script from a to b, by longest common
// subsequence (quadratic, fine for manifests of a few hundred lines).
func lineDiff(a, b []string) []diffOp {
	n, m := len(a), len(b)
	// lcs[i][j] is the length of the LCS of a[i:] and b[j:].
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i], i, j})
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] > lcs[i+1][j]):
			ops = append(ops, diffOp{'+', b[j], i, j})
			j++
		default:
			ops = append(ops, diffOp{'-', a[i], i, j})
			i++
		}
	}
	return ops
}
