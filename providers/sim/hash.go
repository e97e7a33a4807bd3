package sim

import (
	"hash/fnv"
	"strconv"
	"time"
)

// roll is a deterministic number in [0, 1) for one choice (what) about
// one machine: the simulation's only source of randomness, so that the
// same seed and names replay the same failures, jitter and vanishing, in
// any order, without a shared random generator to lock.
func roll(seed int, what, cluster, machine string) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.Itoa(seed)))
	for _, s := range []string{what, cluster, machine} {
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(s))
	}
	return float64(mix(h.Sum64())>>11) / (1 << 53)
}

// mix is splitmix64's finaliser: FNV alone leaves the high bits of short,
// similar inputs (m1, m2, ...) nearly equal.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// spread is a deterministic duration in [0, d) for one choice.
func spread(d time.Duration, seed int, what, cluster, machine string) time.Duration {
	return time.Duration(roll(seed, what, cluster, machine) * float64(d))
}

// clusterPort is the simulated control-plane port of a cluster, in
// [30000, 60000): deterministic per cluster name. Nothing listens on it.
func clusterPort(cluster string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(cluster))
	return 30000 + int32(mix(uint64(h.Sum32()))%30000)
}
