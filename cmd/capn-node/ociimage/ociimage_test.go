package ociimage_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/capn-dev/capn/cmd/capn-node/ociimage"
)

func image() ociimage.Image {
	return ociimage.Image{
		Ref:          "registry.k8s.io/etcd:3.7.0-0",
		Files:        []ociimage.File{{Path: "usr/local/bin/etcd", Mode: 0o755, Content: []byte("#!etcd")}, {Path: "/etc/motd", Content: []byte("hi")}, {Path: "usr/bin/etcd", Link: "../local/bin/etcd"}},
		Dirs:         []ociimage.File{{Path: "tmp", Mode: 0o1777}},
		Entrypoint:   []string{"/usr/local/bin/etcd"},
		Env:          []string{"PATH=/usr/local/bin"},
		OS:           "linux",
		Architecture: "amd64",
	}
}

// readArchive reads an OCI layout tar into its files, checking every blob
// is stored under its own digest.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
		if name, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != name {
				t.Fatalf("blob %s holds content of digest %x", name, sum)
			}
		}
	}
	return files
}

func blob(t *testing.T, files map[string][]byte, d ociimage.Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok || int64(len(b)) != d.Size {
		t.Fatalf("blob %s (size %d) missing or of another size (%d)", d.Digest, d.Size, len(b))
	}
	return b
}

func TestWriteReadsBack(t *testing.T) {
	var out bytes.Buffer
	desc, err := ociimage.Write(&out, image())
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout: %q", files["oci-layout"])
	}
	var index struct {
		Manifests []ociimage.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	m := index.Manifests[0]
	if m.Digest != desc.Digest || m.Annotations["io.containerd.image.name"] != "registry.k8s.io/etcd:3.7.0-0" ||
		m.Annotations["org.opencontainers.image.ref.name"] != "3.7.0-0" || m.Platform["os"] != "linux" {
		t.Fatalf("index manifest %+v, returned %+v", m, desc)
	}
	var manifest struct {
		Config ociimage.Descriptor   `json:"config"`
		Layers []ociimage.Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, files, m), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Config struct {
			Entrypoint, Env []string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if strings.Join(config.Config.Entrypoint, " ") != "/usr/local/bin/etcd" || strings.Join(config.Config.Env, " ") != "PATH=/usr/local/bin" ||
		len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("config %+v", config)
	}

	// The layer: parents first, sorted, modes kept, owner root, epoch.
	var got []string
	tr := tar.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0])))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: uid %d gid %d mtime %s", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		body, _ := io.ReadAll(tr)
		kind := map[byte]string{tar.TypeDir: "d", tar.TypeReg: "f", tar.TypeSymlink: "l"}[h.Typeflag]
		got = append(got, fmt.Sprintf("%s %s %o %s%s", h.Name, kind, h.Mode, body, h.Linkname))
	}
	want := []string{"etc/ d 755 ", "etc/motd f 644 hi", "tmp/ d 1777 ", "usr/ d 755 ", "usr/bin/ d 755 ", "usr/bin/etcd l 777 ../local/bin/etcd", "usr/local/ d 755 ", "usr/local/bin/ d 755 ", "usr/local/bin/etcd f 755 #!etcd"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Deterministic: the same image gives the same bytes.
	var again bytes.Buffer
	if _, err := ociimage.Write(&again, image()); err != nil || !bytes.Equal(again.Bytes(), out.Bytes()) {
		t.Fatalf("a second Write differs (err %v)", err)
	}
}

func TestValidateRefusesBadImages(t *testing.T) {
	tests := []struct {
		name string
		edit func(*ociimage.Image)
		want string
	}{
		{"no tag", func(i *ociimage.Image) { i.Ref = "registry.k8s.io/etcd" }, `ref "registry.k8s.io/etcd": want <name>:<tag>`},
		{"upper case name", func(i *ociimage.Image) { i.Ref = "registry.k8s.io/Etcd:v1" }, `ref "registry.k8s.io/Etcd:v1"`},
		{"no platform", func(i *ociimage.Image) { i.Architecture = "" }, `platform "linux"/"": want an OS and an architecture`},
		{"no files", func(i *ociimage.Image) { i.Files = nil }, "files: none"},
		{"escaping path", func(i *ociimage.Image) { i.Files[0].Path = "usr/../../etc/passwd" }, `path "usr/../../etc/passwd": want a clean path`},
		{"twice", func(i *ociimage.Image) { i.Files[1].Path = "usr/local/bin/etcd" }, `file "usr/local/bin/etcd": given twice`},
		{"bad mode", func(i *ociimage.Image) { i.Files[0].Mode = 0o17777 }, "mode 017777: want Unix mode bits"},
		{"link with content", func(i *ociimage.Image) { i.Files[2].Content = []byte("x") }, `file "usr/bin/etcd": a symbolic link (to "../local/bin/etcd") has no content`},
		{"nothing to run", func(i *ociimage.Image) { i.Entrypoint = nil }, "entrypoint: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := image()
			tt.edit(&img)
			var out bytes.Buffer
			_, err := ociimage.Write(&out, img)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
			if out.Len() != 0 {
				t.Fatal("a refused image wrote bytes")
			}
		})
	}
}
