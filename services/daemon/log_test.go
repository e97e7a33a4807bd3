package daemon

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantJSON  bool
		wantDebug bool
	}{
		{name: "defaults: JSON (not a terminal) at info", cfg: Config{}, wantJSON: true},
		{name: "auto on a buffer is JSON", cfg: Config{LogFormat: "auto", LogLevel: "debug"}, wantJSON: true, wantDebug: true},
		{name: "json", cfg: Config{LogFormat: "json", LogLevel: "warn"}, wantJSON: true},
		{name: "console", cfg: Config{LogFormat: "console", LogLevel: "trace"}, wantDebug: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := NewLogger(tt.cfg, &buf)
			log.Debug().Msg("debug line")
			log.Error().Str("cluster_name", "c1").Msg("error line")
			out := buf.String()
			if got := strings.Contains(out, "debug line"); got != tt.wantDebug {
				t.Errorf("debug logged = %v, want %v:\n%s", got, tt.wantDebug, out)
			}
			last := strings.Split(strings.TrimSpace(out), "\n")
			var m map[string]any
			isJSON := json.Unmarshal([]byte(last[len(last)-1]), &m) == nil
			if isJSON != tt.wantJSON {
				t.Fatalf("JSON = %v, want %v:\n%s", isJSON, tt.wantJSON, out)
			}
			if isJSON && (m["cluster_name"] != "c1" || m["level"] != "error" || m["time"] == nil) {
				t.Errorf("line = %v, want cluster_name, level and time", m)
			}
			if !isJSON && !strings.Contains(out, "cluster_name=c1") {
				t.Errorf("console line lacks its field:\n%s", out)
			}
		})
	}
}
