package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/capn-dev/capn/cmd/capn-node/ociimage"
	"github.com/capn-dev/capn/services/daemon"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// runImage writes an image FROM scratch as an OCI layout archive
// (package ociimage): what hack/nodeimages.sh makes kubeadm's control-plane
// images with, and what a node without a registry imports with
// `ctr images import`.
func runImage(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("capn-node image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	img := ociimage.Image{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	var files, dirs, links, entrypoint, cmd, env list
	fs.StringVar(&img.Ref, "ref", "", "the image's `reference`, <name>:<tag> (required), e.g. registry.k8s.io/etcd:3.7.0-0")
	out := fs.String("out", "", "the archive `file` to write (required; written whole or not at all)")
	fs.Var(&files, "file", "`path=source`: the file source (its mode kept) at path in the image; repeatable, at least one")
	fs.Var(&dirs, "dir", "`path[=mode]`: an empty directory (octal mode, default 0755), e.g. tmp=1777; repeatable")
	fs.Var(&links, "link", "`path=target`: a symbolic link at path to target, e.g. bin/sh=busybox; repeatable")
	fs.Var(&entrypoint, "entrypoint", "one `word` of the entrypoint; repeat for each")
	fs.Var(&cmd, "cmd", "one `word` of the command (the entrypoint's arguments, or the program without one); repeat for each")
	fs.Var(&env, "env", "`NAME=value` of the image's environment; repeatable")
	fs.StringVar(&img.Architecture, "arch", img.Architecture, "the image's `architecture`")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: capn-node image --ref <name>:<tag> --out <file> --file <path>=<source>... [flags]\n\nWrites an image FROM scratch as an OCI image layout archive, for\n`ctr images import`: no registry, no container engine.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return daemon.ExitOK
		}
		return daemon.ExitUsage
	}
	var problems []error
	if *out == "" {
		problems = append(problems, errors.New("--out is required"))
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	for _, f := range files {
		dest, src, ok := strings.Cut(f, "=")
		if !ok || dest == "" || src == "" {
			problems = append(problems, fmt.Errorf("--file %q: want <path in the image>=<source file>", f))
			continue
		}
		st, err := os.Stat(src)
		if err != nil || !st.Mode().IsRegular() {
			problems = append(problems, fmt.Errorf("--file %q: the source must be a readable regular file (%v)", f, err))
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			problems = append(problems, fmt.Errorf("--file %q: %w", f, err))
			continue
		}
		img.Files = append(img.Files, ociimage.File{Path: dest, Mode: int64(st.Mode().Perm()), Content: b})
	}
	for _, d := range dirs {
		p, m, hasMode := strings.Cut(d, "=")
		var mode int64 = 0o755
		if hasMode {
			n, err := strconv.ParseInt(m, 8, 64)
			if err != nil {
				problems = append(problems, fmt.Errorf("--dir %q: the mode must be octal, e.g. 1777", d))
				continue
			}
			mode = n
		}
		img.Dirs = append(img.Dirs, ociimage.File{Path: p, Mode: mode})
	}
	for _, l := range links {
		p, target, ok := strings.Cut(l, "=")
		if !ok || p == "" || target == "" {
			problems = append(problems, fmt.Errorf("--link %q: want <path in the image>=<target>", l))
			continue
		}
		img.Files = append(img.Files, ociimage.File{Path: p, Link: target})
	}
	img.Entrypoint, img.Cmd, img.Env = entrypoint, cmd, env
	if len(problems) == 0 {
		problems = append(problems, img.Validate())
	}
	if err := errors.Join(problems...); err != nil {
		daemon.PrintProblems(stderr, "capn-node image", err)
		return daemon.ExitUsage
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".*")
	if err != nil {
		fmt.Fprintf(stderr, "capn-node image: %v\n", err)
		return daemon.ExitFailed
	}
	defer os.Remove(tmp.Name())
	desc, err := ociimage.Write(tmp, img)
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "capn-node image: %v\n", err)
		return daemon.ExitFailed
	}
	fmt.Fprintf(stderr, "capn-node image: %s %s -> %s\n", img.Ref, desc.Digest, *out)
	return daemon.ExitOK
}
