package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"
)

var sink uint64

// spin does n units of work (the same CPU time per unit, whatever the
// machine's load).
func spin(n int) {
	x := uint64(1)
	for i := range n * 1_000_000 {
		x = x*6364136223846793005 + uint64(i)
	}
	sink += x
}

// A real CPU profile of two goroutines labelled apart, one twice as busy
// as the other, and unlabelled work: cpuByLabel finds each one's share.
func TestCPUByLabelReadsARealProfile(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	for name, n := range map[string]int{"a": 600, "b": 300} {
		go pprof.Do(context.Background(), pprof.Labels("service", name), func(context.Context) {
			spin(n)
			done <- struct{}{}
		})
	}
	<-done
	<-done
	pprof.StopCPUProfile()
	got, err := cpuByLabel(buf.Bytes(), "service")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("by label: %v", got)
	// Profiles sample at 100 Hz: allow for the machine's load (the
	// goroutines may not get a whole core each), but each must be seen
	// and a must have about twice b's time.
	a, b := got["a"], got["b"]
	if a < 100*time.Millisecond || b < 50*time.Millisecond {
		t.Fatalf("a %s, b %s: too little of their spinning seen", a, b)
	}
	if r := float64(a) / float64(b); r < 1.3 || r > 3.5 {
		t.Fatalf("a/b = %.2f (a %s, b %s), want about 2", r, a, b)
	}
}

func TestCPUByLabelRejectsGarbage(t *testing.T) {
	if _, err := cpuByLabel([]byte("not a profile"), "service"); err == nil {
		t.Fatal("no error for bytes that are no profile")
	}
}

// A create's profile cut into segments: each is written as it ends, and
// the CPU by label is the sum over them.
func TestCreateProfileSegments(t *testing.T) {
	dir := t.TempDir()
	p := startCreateProfile(dir, time.Nanosecond)
	if !p.on {
		t.Fatal("the profile did not start")
	}
	work := func(n int) {
		pprof.Do(context.Background(), pprof.Labels("service", "a"), func(context.Context) { spin(n) })
	}
	work(300)
	if err := p.tick(); err != nil {
		t.Fatal(err)
	}
	work(300)
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "cpu-*-*s.pprof"))
	if err != nil || len(files) != 2 {
		t.Fatalf("segment files %v (%v), want 2", files, err)
	}
	total, err := p.byLabel("service")
	if err != nil {
		t.Fatal(err)
	}
	first, err := cpuByLabel(p.segments[0], "service")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first segment %v, both %v", first["a"], total["a"])
	if first["a"] < 50*time.Millisecond || total["a"] < first["a"]+50*time.Millisecond {
		t.Fatalf("a: %s in the first segment, %s in both: the second segment's work is missing", first["a"], total["a"])
	}
}
