package nodecapacity

import (
	"strings"
	"testing"
)

func TestFromParameters(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]string
		want    string
		wantErr []string
	}{
		{"defaults: kwok's", nil, "cpu=1k,memory=1Ti,pods=1M", nil},
		{"given", map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110", "size": "xl"}, "cpu=2,memory=4Gi,pods=110", nil},
		{"canonical", map[string]string{"cpu": "2000m", "memory": "1024Mi"}, "cpu=2,memory=1Gi,pods=1M", nil},
		{"bad", map[string]string{"cpu": "two", "memory": "-1Gi", "pods": "1500m"}, "", []string{
			`template parameter cpu: "two" is not a quantity`,
			`template parameter memory: "-1Gi" must be more than 0`,
			`template parameter pods: "1500m" must be a whole number`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromParameters(tt.params)
			if len(tt.wantErr) > 0 {
				for _, w := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("error %v does not say %q", err, w)
					}
				}
				return
			}
			if err != nil || c.String() != tt.want {
				t.Fatalf("capacity %q, %v; want %q", c, err, tt.want)
			}
			back, err := Parse(c.String())
			if err != nil || back.String() != tt.want {
				t.Errorf("Parse(String) = %q, %v", back, err)
			}
		})
	}
	if _, err := Parse("gpu=1"); err == nil || !strings.Contains(err.Error(), `unknown resource "gpu"`) {
		t.Errorf("Parse of an unknown resource: %v", err)
	}
}
