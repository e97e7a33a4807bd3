package arch

import (
	"os/exec"
	"strings"
	"testing"
)

// testOnlyModules are dependencies capn's tests use to check what capn
// renders (bootstraptest validates Ignition configs with Ignition's own
// parser); no program may link them.
var testOnlyModules = []string{"github.com/coreos/ignition/"}

func TestTestOnlyDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps found only %d packages", len(deps))
	}
	for _, d := range deps {
		for _, m := range testOnlyModules {
			if strings.HasPrefix(d, m) {
				t.Errorf("a capn program links %s: keep it to tests (bootstraptest)", d)
			}
		}
	}
	// The rule must be able to fail: the test helper does import it.
	out, err = exec.Command("go", "list", "-deps", module+"/services/bootstrapper/bootstrap/bootstraptest").Output()
	if err != nil || !strings.Contains(string(out), testOnlyModules[0]) {
		t.Fatalf("bootstraptest no longer imports %s (err %v): update testOnlyModules", testOnlyModules[0], err)
	}
}
