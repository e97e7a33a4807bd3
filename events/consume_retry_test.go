package events

import (
	"testing"
	"time"
)

func TestBackoffByDelivery(t *testing.T) {
	spec := ConsumerSpec{Backoff: []time.Duration{time.Second, 5 * time.Second}}
	tests := []struct {
		delivery uint64
		want     time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 5 * time.Second}, {3, 5 * time.Second}, {100, 5 * time.Second},
	}
	for _, tt := range tests {
		if got := spec.backoff(tt.delivery); got != tt.want {
			t.Errorf("backoff(%d) = %v, want %v", tt.delivery, got, tt.want)
		}
	}
	if got := (ConsumerSpec{}).withDefaults().backoff(4); got != 15*time.Second {
		t.Errorf("default backoff(4) = %v, want 15s", got)
	}
}
