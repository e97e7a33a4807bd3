package cli

import (
	"strings"
	"testing"
)

// TestDiff: capn diff shows what an apply would change as a unified diff,
// exit 0 without differences, 1 with, 2 on error, and writes nothing.
func TestDiff(t *testing.T) {
	a := newApplyTest(t)
	stored := a.file("a.yaml", clusterYAML("a", 2))
	if code, _, stderr := a.run("", "apply", "-f", stored); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := a.run("", "diff", "-f", stored)
	a.want("no differences", code, stdout, stderr, 0, "", "")

	changed := a.file("a2.yaml", strings.Replace(clusterYAML("a", 5), "metadata: {name: a}", "metadata: {name: a, labels: {env: dev}}", 1))
	code, stdout, stderr = a.run("", "diff", "-f", changed)
	if code != 1 || stderr != "" || !strings.HasPrefix(stdout, "--- cluster/a (stored)\n+++ cluster/a (after apply)\n@@ -") ||
		!strings.Contains(stdout, "\n+  labels:\n+    env: dev\n") || !strings.Contains(stdout, "-    replicas: 2\n+    replicas: 5\n") ||
		strings.Contains(stdout, "status") || strings.Contains(stdout, "generation") || strings.Contains(stdout, "uid") {
		t.Errorf("differences: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = a.run("", "diff", "-f", a.file("new.yaml", clusterYAML("new", 1)))
	if code != 1 || !strings.HasPrefix(stdout, "--- cluster/new (not found)\n+++ cluster/new (after apply)\n@@ -0,0 +1,") || strings.Contains(stdout, "\n-") {
		t.Errorf("a cluster not stored: exit %d\nstdout:\n%s", code, stdout)
	}
	code, stdout, stderr = a.run("", "diff", "-f", a.file("bad.yaml", clusterYAML("a", 2)+"---\n"+clusterYAML("z", -1)))
	a.want("a refused document", code, stdout, stderr, 2, "",
		`capn diff: document 2 (cluster z): spec.workerPools[0].replicas: "-1": must be 0 or more`+"\n"+"capn diff: 1 of 2 documents refused\n")
	code, _, _ = a.run("", "diff")
	if code != 2 {
		t.Errorf("diff without -f: exit %d, want 2", code)
	}
	if got := a.clusters(); strings.Join(got, ",") != "a" {
		t.Errorf("after the diffs the clusters are %v, want only a", got)
	}
	code, stdout, _ = a.run("", "diff", "-f", stored)
	if code != 0 || stdout != "" {
		t.Errorf("a diff wrote: the stored manifest now differs (exit %d):\n%s", code, stdout)
	}
}

// TestWriteUnified checks the line diff against what diff -u prints for
// the same inputs.
func TestWriteUnified(t *testing.T) {
	const ten = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	tests := []struct {
		name string
		a, b string
		want string // without the --- and +++ lines; "" for no diff
	}{
		{name: "equal", a: ten, b: ten},
		{name: "both empty"},
		{name: "one line changed in the middle", a: ten, b: strings.Replace(ten, "5\n", "five\n", 1),
			want: "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"},
		{name: "all added", b: "a\nb\n", want: "@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{name: "all removed", a: "a\n", want: "@@ -1 +0,0 @@\n-a\n"},
		{name: "no newline at the end", a: "1\n2", b: "1\n3",
			want: "@@ -1,2 +1,2 @@\n 1\n-2\n\\ No newline at end of file\n+3\n\\ No newline at end of file\n"},
		{name: "added at the end", a: "1\n2\n", b: "1\n2\n3\n", want: "@@ -1,2 +1,3 @@\n 1\n 2\n+3\n"},
		{name: "two distant changes, two hunks", a: ten + ten, b: strings.Replace(strings.Replace(ten+ten, "2\n", "two\n", 1), "9\n10\n1\n", "9\n10\n1\n", 1) + "end\n",
			want: "@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -18,3 +18,4 @@\n 8\n 9\n 10\n+end\n"},
		{name: "close changes merge into one hunk", a: ten, b: strings.Replace(strings.Replace(ten, "3\n", "c\n", 1), "8\n", "h\n", 1),
			want: "@@ -1,10 +1,10 @@\n 1\n 2\n-3\n+c\n 4\n 5\n 6\n 7\n-8\n+h\n 9\n 10\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			differ := writeUnified(&b, "a", "b", splitLines(tt.a), splitLines(tt.b))
			want := ""
			if tt.want != "" {
				want = "--- a\n+++ b\n" + tt.want
			}
			if differ != (tt.want != "") || b.String() != want {
				t.Errorf("differ %v, got:\n%s\nwant:\n%s", differ, b.String(), want)
			}
		})
	}
}
