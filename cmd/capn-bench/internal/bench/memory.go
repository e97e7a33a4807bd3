package bench

import (
	"os"
	"runtime/metrics"
	"sync"
	"time"
)

// memPeak is what a process held at most during a measure.
type memPeak struct {
	// RSSMiB is the peak resident set: the kernel's high-water mark
	// (VmHWM) when it could be reset at the start (HWMReset), else the
	// highest VmRSS sampled.
	RSSMiB   float64
	HWMReset bool
	// HeapMiB is the highest Go heap sampled (live and not yet swept
	// objects, /memory/classes/heap/objects:bytes); GoMiB the highest
	// memory the Go runtime had mapped and not released
	// (/memory/classes/total:bytes less heap/released).
	HeapMiB, GoMiB float64
}

// memSampler samples the process's resident set and Go heap until stop.
type memSampler struct {
	mu    sync.Mutex
	peak  memPeak
	last  memPeak
	done  chan struct{}
	ended chan struct{}
}

// startMemSampler resets the kernel's high-water mark of this process's
// resident set (clear_refs 5, Linux 4.0 and later) and samples every
// interval.
func startMemSampler(every time.Duration) *memSampler {
	m := &memSampler{done: make(chan struct{}), ended: make(chan struct{})}
	m.peak.HWMReset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	m.sample()
	go func() {
		defer close(m.ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

var memMetrics = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

func (m *memSampler) sample() {
	s := make([]metrics.Sample, len(memMetrics))
	for i, n := range memMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	u := func(i int) float64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return float64(s[i].Value.Uint64()) / (1 << 20)
	}
	now := memPeak{HeapMiB: u(0), GoMiB: u(1) - u(2)}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		now.RSSMiB, _ = parseKiB(string(b), "VmRSS:")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = now
	m.peak.RSSMiB = max(m.peak.RSSMiB, now.RSSMiB)
	m.peak.HeapMiB = max(m.peak.HeapMiB, now.HeapMiB)
	m.peak.GoMiB = max(m.peak.GoMiB, now.GoMiB)
}

// now is the last sample.
func (m *memSampler) now() memPeak {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// stop ends the sampling and returns the peaks, the resident set's from
// the kernel's high-water mark when it was reset.
func (m *memSampler) stop() *memPeak {
	close(m.done)
	<-m.ended
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peak
	if p.HWMReset {
		if b, err := os.ReadFile("/proc/self/status"); err == nil {
			if hwm, err := parseKiB(string(b), "VmHWM:"); err == nil {
				p.RSSMiB = max(p.RSSMiB, hwm)
			} else {
				p.HWMReset = false
			}
		}
	}
	return &p
}
