// Package ociimage writes container images FROM scratch as OCI image
// layout archives (the tar `ctr images import` and `docker load` read),
// without a registry or a container engine: one uncompressed layer holding
// the given files, an image config (entrypoint, environment), a manifest and
// an index naming the image by its reference. Everything is deterministic:
// the same files give the same bytes and digests (entries sorted, owner
// root, modification time the Unix epoch).
//
// capn-node uses it for the images a real node's kubeadm static pods run
// (`capn-node image`, hack/nodeimages.sh): registry.k8s.io/kube-apiserver
// and the others, built from the binaries capn builds and imported into the
// node's containerd under their ordinary names, so nothing is pulled.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Media types written.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// File is one file of the image's layer.
type File struct {
	// Path in the image, relative or absolute ("usr/local/bin/etcd");
	// parent directories are added (0755).
	Path string
	// Mode is the Unix mode bits (0o7777: permissions, setuid, setgid,
	// sticky); 0 is 0644 for a file, 0755 for a directory.
	Mode    int64
	Content []byte
	// Link, when set, makes the entry a symbolic link to Link (relative
	// to the link's directory, or absolute in the image), e.g. busybox
	// for bin/sh; Mode and Content are then unused.
	Link string
}

// Image is what Write writes.
type Image struct {
	// Ref is the image's full reference, "<name>:<tag>", e.g.
	// registry.k8s.io/kube-apiserver:v1.37.2: containerd imports the
	// image under it.
	Ref string
	// Files of the one layer; Dirs are empty directories to add (with
	// their mode, e.g. tmp 01777).
	Files []File
	Dirs  []File
	// Entrypoint, Cmd, Env and WorkingDir of the image config.
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// OS and Architecture of the platform (linux, amd64).
	OS, Architecture string
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    map[string]string `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// refRe is a reference with a tag: lowercase name components separated by
// '/', an optional registry host (with port) first, then ':' and a tag.
var refRe = regexp.MustCompile(`^([a-z0-9]+([._-][a-z0-9]+)*(\.[a-z0-9-]+)*(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Validate reports every problem with img at once.
func (img Image) Validate() error {
	var errs []error
	if !refRe.MatchString(img.Ref) {
		errs = append(errs, fmt.Errorf("ref %q: want <name>:<tag>, e.g. registry.k8s.io/pause:3.10.2 (lowercase name, a tag of letters, digits, '_', '.', '-')", img.Ref))
	}
	if img.OS == "" || img.Architecture == "" {
		errs = append(errs, fmt.Errorf("platform %q/%q: want an OS and an architecture (linux/amd64)", img.OS, img.Architecture))
	}
	if len(img.Files) == 0 {
		errs = append(errs, errors.New("files: none; an image FROM scratch needs at least its binary"))
	}
	seen := map[string]bool{}
	for i, f := range append(append([]File(nil), img.Files...), img.Dirs...) {
		p, err := cleanPath(f.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("file %d: %w", i, err))
			continue
		}
		if f.Mode < 0 || f.Mode > 0o7777 {
			errs = append(errs, fmt.Errorf("file %q: mode %#o: want Unix mode bits up to 07777", f.Path, f.Mode))
		}
		if f.Link != "" && len(f.Content) > 0 {
			errs = append(errs, fmt.Errorf("file %q: a symbolic link (to %q) has no content", f.Path, f.Link))
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("file %q: given twice", f.Path))
		}
		seen[p] = true
	}
	if len(img.Entrypoint) == 0 && len(img.Cmd) == 0 {
		errs = append(errs, errors.New("entrypoint: empty, and no cmd; the image would run nothing"))
	}
	return errors.Join(errs...)
}

func cleanPath(p string) (string, error) {
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "" || c == "" || strings.Contains(p, "..") || c != strings.TrimPrefix(p, "/") {
		return "", fmt.Errorf("path %q: want a clean path in the image, e.g. usr/local/bin/etcd", p)
	}
	return c, nil
}

// Write writes img as an OCI image layout tar to w and returns the
// manifest's descriptor (its digest is the image's).
func Write(w io.Writer, img Image) (Descriptor, error) {
	if err := img.Validate(); err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	layer, err := layerTar(img)
	if err != nil {
		return Descriptor{}, fmt.Errorf("image %s: layer: %w", img.Ref, err)
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) Descriptor {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	layerDesc := add(MediaTypeLayer, layer)
	type imageConfig struct {
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		Env        []string `json:"Env,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	}
	config, err := json.Marshal(map[string]any{
		"architecture": img.Architecture,
		"os":           img.OS,
		"config":       imageConfig{Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, WorkingDir: img.WorkingDir},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		"history":      []map[string]any{{"created_by": "capn-node image (FROM scratch)", "comment": "capn ociimage"}},
	})
	if err != nil {
		return Descriptor{}, err
	}
	configDesc := add(MediaTypeConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        configDesc,
		"layers":        []Descriptor{layerDesc},
	})
	if err != nil {
		return Descriptor{}, err
	}
	manifestDesc := add(MediaTypeManifest, manifest)
	manifestDesc.Platform = map[string]string{"architecture": img.Architecture, "os": img.OS}
	manifestDesc.Annotations = map[string]string{
		// containerd's import names the image by this one.
		"io.containerd.image.name":          img.Ref,
		"org.opencontainers.image.ref.name": img.Ref[strings.LastIndex(img.Ref, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeIndex,
		"manifests":     []Descriptor{manifestDesc},
	})
	if err != nil {
		return Descriptor{}, err
	}

	out := tar.NewWriter(w)
	file := func(name string, b []byte) error {
		if err := out.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := out.Write(b)
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return Descriptor{}, err
	}
	if err := file("index.json", index); err != nil {
		return Descriptor{}, err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		if err := file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d]); err != nil {
			return Descriptor{}, err
		}
	}
	if err := out.Close(); err != nil {
		return Descriptor{}, err
	}
	return manifestDesc, nil
}

// layerTar is the uncompressed layer: every parent directory, the given
// directories and files, sorted by path.
func layerTar(img Image) ([]byte, error) {
	type entry struct {
		path string
		mode int64
		dir  bool
		data []byte
		link string
	}
	entries := map[string]entry{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{path: d, mode: 0o755, dir: true}
			}
		}
	}
	for _, d := range img.Dirs {
		p, _ := cleanPath(d.Path)
		mode := d.Mode
		if mode == 0 {
			mode = 0o755
		}
		addParents(p)
		entries[p] = entry{path: p, mode: mode, dir: true}
	}
	for _, f := range img.Files {
		p, _ := cleanPath(f.Path)
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if e, ok := entries[p]; ok && e.dir {
			return nil, fmt.Errorf("%s is both a directory and a file", p)
		}
		addParents(p)
		if f.Link != "" {
			mode = 0o777
		}
		entries[p] = entry{path: p, mode: mode, data: f.Content, link: f.Link}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := entries[p]
		h := &tar.Header{Name: p, Mode: e.mode, ModTime: time.Unix(0, 0)}
		switch {
		case e.dir:
			h.Name += "/"
			h.Typeflag = tar.TypeDir
		case e.link != "":
			h.Typeflag = tar.TypeSymlink
			h.Linkname = e.link
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
