package cli

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/capn-dev/capn/services/daemon"
)

// version is the release main was built as (Main sets it), else the
// module version.
var version = ""

func cmdVersion(_ context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("capn version", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: capn version\n\nPrints capn's version, commit and Go version.")
	}
	pos, err := parseCommandLine(e, fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := wantArgs(pos); err != nil {
		return reportError(e.stderr, "capn version", nil, err)
	}
	fmt.Fprintln(e.stdout, versionString())
	return daemon.ExitOK
}

func versionString() string {
	v, commit, dirty := version, "unknown", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value[:min(12, len(s.Value))]
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", modified"
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("capn %s (commit %s%s) %s %s/%s", v, commit, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// versionShort is the version alone, for the User-Agent: "v0.1.0" or
// "devel".
func versionShort() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}
