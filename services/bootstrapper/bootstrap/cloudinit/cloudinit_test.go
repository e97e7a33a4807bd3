package cloudinit

import (
	"strings"
	"testing"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

func TestIsCloudConfig(t *testing.T) {
	for in, want := range map[string]bool{
		"#cloud-config": true, "#cloud-config\n": true, "#cloud-config\r\n": true,
		"#cloud-configx": false, " #cloud-config": false, "#!/bin/sh": false, "": false,
	} {
		if got := IsCloudConfig([]byte(in)); got != want {
			t.Errorf("IsCloudConfig(%q) = %v", in, got)
		}
	}
}

func TestAppendWriteFiles(t *testing.T) {
	files := Files([]bootstrap.File{{Path: "/run/capn/x", Content: []byte("x: 'y'\n"), Permissions: "0600"}})
	tests := []struct {
		name, doc, want, wantErr string
	}{
		{"no write_files", "#cloud-config\nruncmd: [a]\n", "#cloud-config\nruncmd:\n- a\nwrite_files:\n- path: /run/capn/x\n  permissions: \"0600\"\n  encoding: b64\n  content: eDogJ3knCg==\n", ""},
		{"null write_files", "#cloud-config\nwrite_files:\n", "#cloud-config\nwrite_files:\n- path: /run/capn/x\n", ""},
		{"existing entries kept first", "#cloud-config\nwrite_files:\n- {path: /etc/a, content: a}\n", "#cloud-config\nwrite_files:\n- path: /etc/a\n  content: a\n- path: /run/capn/x\n", ""},
		{"empty document", "#cloud-config\n", "#cloud-config\nwrite_files:\n- path: /run/capn/x\n", ""},
		{"not cloud-config", "#!/bin/sh\n", "", "not a #cloud-config document"},
		{"scalar document", "#cloud-config\nhello\n", "", "parse cloud-config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendWriteFiles([]byte(tt.doc), files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(got), tt.want) {
				t.Fatalf("got\n%s\nwant prefix\n%s", got, tt.want)
			}
		})
	}
}
