package bench

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// cpuByLabel sums the CPU time of a runtime/pprof CPU profile (gzipped
// profile.proto) by the value of the pprof label key ("" for samples
// without it). It reads only what it needs of the format: the sample
// types, the samples' values and labels, and the string table.
func cpuByLabel(profile []byte, key string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(profile))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	type sample struct {
		values []int64
		labels [][2]int64 // key, str: string table indexes
	}
	var (
		types   []int64 // each sample type's type: a string table index
		samples []sample
		strs    []string
	)
	err = fields(raw, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1: // sample_type
			return fields(v, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				if n == 1 {
					types = append(types, int64(x))
				}
				return nil
			})
		case 2: // sample
			var s sample
			err := fields(v, func(n protowire.Number, t protowire.Type, b []byte, x uint64) error {
				switch {
				case n == 2 && t == protowire.BytesType: // packed values
					for len(b) > 0 {
						u, m := protowire.ConsumeVarint(b)
						if m < 0 {
							return protowire.ParseError(m)
						}
						s.values, b = append(s.values, int64(u)), b[m:]
					}
				case n == 2:
					s.values = append(s.values, int64(x))
				case n == 3:
					var l [2]int64
					err := fields(b, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
						if n == 1 || n == 2 {
							l[n-1] = int64(x)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 6: // string_table
			if typ != protowire.BytesType {
				return errors.New("string_table: not bytes")
			}
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	cpu := -1
	for i, t := range types {
		if str(t) == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("cpu profile: no cpu sample type")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if cpu >= len(s.values) {
			continue
		}
		v := ""
		for _, l := range s.labels {
			if str(l[0]) == key {
				v = str(l[1])
			}
		}
		out[v] += time.Duration(s.values[cpu])
	}
	return out, nil
}

// fields calls f for each field of the protobuf message b: its number and
// wire type, and its bytes (length-delimited) or its value (varint and
// fixed).
func fields(b []byte, f func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// createProfile is a CPU profile of a fleet create, for its CPU by
// service. With a directory it is cut into segments of every, each written
// there (cpu-<from>-<to>s.pprof, seconds since the start) as it ends: a
// create whose rate collapses after minutes needs the profile of those
// minutes alone, which a profile of the whole create dilutes.
type createProfile struct {
	buf      bytes.Buffer
	on       bool
	dir      string
	every    time.Duration
	start    time.Time
	segStart time.Time
	segments [][]byte
}

// startCreateProfile starts profiling; on is false when a profile was
// already running (--cpuprofile: the whole run's).
func startCreateProfile(dir string, every time.Duration) *createProfile {
	p := &createProfile{dir: dir, every: every, start: time.Now()}
	p.segStart = p.start
	p.on = pprof.StartCPUProfile(&p.buf) == nil
	return p
}

// tick ends the current segment and starts the next when one is due.
func (p *createProfile) tick() error {
	if !p.on || p.dir == "" || time.Since(p.segStart) < p.every {
		return nil
	}
	if err := p.cut(); err != nil {
		return err
	}
	p.segStart = time.Now()
	p.on = pprof.StartCPUProfile(&p.buf) == nil
	return nil
}

// stop ends the profile (and its last segment).
func (p *createProfile) stop() error {
	if !p.on {
		return nil
	}
	p.on = false
	return p.cut()
}

// cut stops the profiler and keeps (and, with a directory, writes) what
// it recorded since the segment began.
func (p *createProfile) cut() error {
	pprof.StopCPUProfile()
	seg := bytes.Clone(p.buf.Bytes())
	p.buf.Reset()
	p.segments = append(p.segments, seg)
	if p.dir == "" {
		return nil
	}
	name := fmt.Sprintf("cpu-%04.0f-%04.0fs.pprof", p.segStart.Sub(p.start).Seconds(), time.Since(p.start).Seconds())
	if err := os.WriteFile(filepath.Join(p.dir, name), seg, 0o644); err != nil {
		return fmt.Errorf("cpu profile segment: %w", err)
	}
	return nil
}

// byLabel is cpuByLabel summed over the segments (nil: nothing profiled).
func (p *createProfile) byLabel(key string) (map[string]time.Duration, error) {
	var out map[string]time.Duration
	for _, seg := range p.segments {
		if len(seg) == 0 {
			continue
		}
		m, err := cpuByLabel(seg, key)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]time.Duration{}
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out, nil
}
