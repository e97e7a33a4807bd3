package cli

import (
	"fmt"
	"strings"
	"testing"
)

// capn get clusterclasses and capn delete clusterclass on a real capn dev:
// the table counts each class's clusters and those up to date; -o yaml,
// json and name print the class; a delete is refused naming the clusters
// that use the class, and goes through once they are gone.
func TestClusterClassesGetAndDelete(t *testing.T) {
	a := newApplyTest(t)
	code, stdout, stderr := a.run("", "apply", "-f", a.file("class.yaml", cliClassYAML))
	a.want("apply class", code, stdout, stderr, 0, "clusterclass/small created\n", "")
	spare := strings.Replace(cliClassYAML, "name: small", "name: spare", 1)
	spare = strings.Replace(spare, "  variables:\n  - {name: size, type: string, default: s, enum: [s, m], paths: [/controlPlane/template/parameters/size]}\n",
		"  poolClasses:\n  - {name: general, template: {provider: sim, replicas: 1}}\n  - {name: big, template: {provider: sim, replicas: 2}}\n", 1)
	code, stdout, stderr = a.run("", "apply", "-f", a.file("spare.yaml", spare))
	a.want("apply spare", code, stdout, stderr, 0, "clusterclass/spare created\n", "")
	var clusters strings.Builder
	for i := range 2 {
		fmt.Fprintf(&clusters, "---\napiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: k%d}\nspec:\n  topology: {class: small}\n", i)
	}
	if code, stdout, stderr = a.run("", "apply", "-f", a.file("clusters.yaml", clusters.String())); code != 0 {
		t.Fatalf("apply clusters: %d\n%s\n%s", code, stdout, stderr)
	}
	// Revision 2: both clusters stay at 1, not up to date.
	code, stdout, stderr = a.run("", "apply", "-f", a.file("class2.yaml", strings.Replace(cliClassYAML, "default: s,", "default: m,", 1)))
	a.want("apply class 2", code, stdout, stderr, 0, "clusterclass/small configured\n", "")

	code, stdout, stderr = a.run("", "get", "clusterclasses")
	if code != 0 {
		t.Fatalf("get clusterclasses: %d %s", code, stderr)
	}
	rows := tableRows(stdout)
	want := map[string][]string{
		"small": {"small", "2", "1", "<none>", "2", "0"},
		"spare": {"spare", "1", "0", "general,big", "0", "0"},
	}
	if len(rows) != 3 || strings.Join(rows[0], "|") != "NAME|REVISION|VARIABLES|POOL CLASSES|CLUSTERS|UP-TO-DATE|AGE" {
		t.Fatalf("get clusterclasses:\n%s", stdout)
	}
	for _, r := range rows[1:] {
		w := want[r[0]]
		if w == nil || strings.Join(r[:6], "|") != strings.Join(w, "|") {
			t.Errorf("row %q, want it to start %q\n%s", r, w, stdout)
		}
	}
	code, stdout, _ = a.run("", "get", "clusterclass", "small", "-o", "wide")
	if code != 0 || !strings.Contains(stdout, "v1.34.2") || !strings.Contains(stdout, "HASH") {
		t.Fatalf("get clusterclass small -o wide:\n%s", stdout)
	}
	code, stdout, stderr = a.run("", "get", "clusterclass/small", "-o", "yaml")
	if code != 0 || !strings.Contains(stdout, "kind: ClusterClass") || !strings.Contains(stdout, "revision: \"2\"") {
		t.Fatalf("get clusterclass/small -o yaml: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = a.run("", "get", "clusterclasses", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"kind": "ClusterClassList"`) {
		t.Fatalf("get clusterclasses -o json:\n%s", stdout)
	}
	code, stdout, _ = a.run("", "get", "cc", "-o", "name")
	a.want("get cc -o name", code, stdout, "", 0, "clusterclass/small\nclusterclass/spare\n", "")

	// Refused while k0 and k1 use it; spare goes at once.
	code, stdout, stderr = a.run("", "delete", "clusterclass", "small")
	if code == 0 || !strings.Contains(stderr, "capn delete: Conflict (409): cluster class small is used by 2 clusters: k0, k1: delete those clusters") {
		t.Fatalf("delete a class in use: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run("", "delete", "clusterclass/spare")
	a.want("delete spare", code, stdout, stderr, 0, "clusterclass/spare deleted\n", "")
	if code, stdout, stderr = a.run("", "delete", "cluster", "k0", "k1", "--wait", "--timeout", "2m"); code != 0 {
		t.Fatalf("delete clusters: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run("", "delete", "clusterclass", "small")
	a.want("delete small", code, stdout, stderr, 0, "clusterclass/small deleted\n", "")
	code, _, stderr = a.run("", "get", "clusterclass", "small")
	if code == 0 || !strings.Contains(stderr, "not found") {
		t.Fatalf("get a deleted class: %d %s", code, stderr)
	}
}

// tableRows splits a table into its rows' cells (columns are separated
// by two or more spaces).
func tableRows(s string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		var cells []string
		for _, c := range strings.Split(line, "  ") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		rows = append(rows, cells)
	}
	return rows
}
