// Package arch holds the project's import rules as a test, so a change
// that breaks them fails `make test` (Cluster API keeps the same lines with
// depguard): the schemas import nothing but protobuf, no core package
// imports a provider, a provider imports no service of the core, a service
// imports no other service (they talk only through NATS), and the
// libraries below the services (secrets/, kubeapi/) import no service. A
// package's tests are held to the same rules as the package.
package arch

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/capn-dev/capn"

type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	Standard                           bool
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports,Standard", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func isStd(path string) bool { return !strings.Contains(strings.Split(path, "/")[0], ".") }

func TestImportRules(t *testing.T) {
	rules := []struct {
		name    string
		applies func(p string) bool
		allowed func(imp string) bool
	}{
		{
			name:    "schemas import nothing but protobuf",
			applies: func(p string) bool { return strings.HasPrefix(p, module+"/schemas/capn/") },
			allowed: func(imp string) bool {
				return isStd(imp) || strings.HasPrefix(imp, "google.golang.org/protobuf/") || strings.HasPrefix(imp, module+"/schemas/capn/")
			},
		},
		{
			name: "the core imports no provider",
			applies: func(p string) bool {
				return !strings.HasPrefix(p, module+"/providers/") && !strings.HasPrefix(p, module+"/cmd/") && !strings.HasPrefix(p, module+"/tests/")
			},
			allowed: func(imp string) bool { return !strings.HasPrefix(imp, module+"/providers/") },
		},
		{
			name:    "providers import only schemas, the events plumbing, the runtime and the SDK",
			applies: func(p string) bool { return strings.HasPrefix(p, module+"/providers/") },
			allowed: func(imp string) bool {
				if !strings.HasPrefix(imp, module+"/") {
					return true
				}
				for _, ok := range []string{"/schemas/", "/events", "/services/daemon", "/providers/"} {
					if strings.HasPrefix(imp, module+ok) {
						return true
					}
				}
				return false
			},
		},
		{
			name:    "no service imports another service's packages",
			applies: func(p string) bool { return service(p) != "" },
			allowed: func(imp string) bool { return service(imp) == "" }, // its own: sameService
		},
		{
			name: "secrets and kubeapi import no service",
			applies: func(p string) bool {
				return under(p, module+"/secrets") || under(p, module+"/kubeapi")
			},
			allowed: func(imp string) bool { return service(imp) == "" },
		},
	}
	pkgs := listPackages(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			checked := 0
			for _, p := range pkgs {
				if !r.applies(p.ImportPath) {
					continue
				}
				checked++
				for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
					if r.allowed(imp) || sameService(p.ImportPath, imp) {
						continue
					}
					t.Errorf("%s imports %s", p.ImportPath, imp)
				}
			}
			if checked == 0 {
				t.Fatal("the rule matched no package")
			}
		})
	}
}

// service is the service a package belongs to: services/<name>/... or the
// gateway; "" for everything else, services/daemon included (what every
// program shares, not a service).
func service(p string) string {
	if under(p, module+"/gateway") {
		return "gateway"
	}
	rest, ok := strings.CutPrefix(p, module+"/services/")
	if !ok {
		return ""
	}
	if name := strings.Split(rest, "/")[0]; name != "daemon" {
		return name
	}
	return ""
}

// sameService: a service may import its own subpackages.
func sameService(pkg, imp string) bool {
	return service(pkg) != "" && service(pkg) == service(imp)
}

// under: p is dir or a package below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
