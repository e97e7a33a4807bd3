package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/cloudconfig"
	"github.com/capn-dev/capn/cmd/capn-node/kubeletunit"
	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
	"github.com/capn-dev/capn/services/daemon"
)

// runCloudConfig runs a machine's #cloud-config bootstrap data on this
// machine (package cloudconfig): write_files, then runcmd — what
// cloud-init does on a cloud machine, for a machine without it.
func runCloudConfig(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("capn-node cloud-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "the bootstrap data `file` (#cloud-config; required)")
	timeout := fs.Duration("timeout", 0, "bound on each runcmd entry (`duration`; 0: none)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: capn-node cloud-config --data <file> [flags]\n\nRuns the #cloud-config subset capn renders on this machine, as root: write_files\n(path, content, encoding, permissions, owner), then every runcmd entry in order,\nas cloud-init would. Exit 0 when every command succeeded, 1 otherwise.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return daemon.ExitOK
		}
		return daemon.ExitUsage
	}
	if *data == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "capn-node cloud-config: --data <file> is required, and nothing else")
		return daemon.ExitUsage
	}
	b, err := os.ReadFile(*data)
	if err != nil {
		fmt.Fprintf(stderr, "capn-node cloud-config: %v\n", err)
		return daemon.ExitUsage
	}
	c, err := cloudconfig.Parse(b)
	if err != nil {
		fmt.Fprintf(stderr, "capn-node cloud-config: %s: %v\n", *data, err)
		return daemon.ExitUsage
	}
	r := cloudconfig.Runner{Root: "/", Timeout: *timeout, Log: stderr, Commands: runcmd.Runner{Dir: "/", Output: stderr, TailLines: 20}}
	start := time.Now()
	if _, err := r.Run(ctx, c); err != nil {
		fmt.Fprintf(stderr, "capn-node cloud-config: failed after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
		return daemon.ExitFailed
	}
	fmt.Fprintf(stderr, "capn-node cloud-config: done in %s\n", time.Since(start).Round(time.Millisecond))
	return daemon.ExitOK
}

// runKubelet keeps a kubelet running as kubeadm's systemd unit would
// (package kubeletunit), until SIGINT or SIGTERM.
func runKubelet(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("capn-node kubelet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	u := kubeletunit.Unit{Root: "/", Output: stderr}
	fs.StringVar(&u.Kubelet, "kubelet", "/usr/bin/kubelet", "the kubelet `binary`")
	fs.DurationVar(&u.RestartDelay, "restart-sec", kubeletunit.RestartDelay, "wait this `long` after the kubelet exits before starting it again")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: capn-node kubelet [flags]\n\nKeeps a kubelet running as kubeadm's systemd unit does, on a machine without\nsystemd: once kubeadm wrote %s, the kubelet runs with the drop-in's\narguments, %s and %s, restarted when it exits.\n\n", kubeletunit.ConfigFile, kubeletunit.FlagsEnv, kubeletunit.DefaultsEnv)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return daemon.ExitOK
		}
		return daemon.ExitUsage
	}
	if st, err := os.Stat(u.Kubelet); err != nil || st.IsDir() || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "capn-node kubelet: --kubelet %q must be the kubelet binary (%v), and no arguments follow\n", u.Kubelet, err)
		return daemon.ExitUsage
	}
	if err := u.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "capn-node kubelet: %v\n", err)
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}
