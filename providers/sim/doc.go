// Package sim is the simulated infrastructure provider: capn's provider
// for scale tests, the demo and tests of the other services. It is honest
// about what it simulates:
//
//   - A machine is a record in memory. There is no VM, no container, no
//     process, no disk and no kubelet. The records are persisted only as
//     the provider's own observed keys (infra.sim.<cluster>.<machine>), and
//     a restarted provider re-adopts its machines from them (sdk.Adopter);
//     while it is down, its machines "exist" but nothing reports for them.
//   - A machine boots: it is Creating for BootLatency (+ up to BootJitter),
//     then Running with provider id sim://<cluster>/<machine>, a simulated
//     InternalIP (10.x.y.z, one network per cluster) and Hostname (the
//     machine's name).
//   - Its "node" is not a goroutine but an entry in one scheduler heap: a
//     running machine publishes NodeHeartbeat{ready: true, kubelet_version:
//     the version it was created with, node_name: the machine} on
//     capn.health.<cluster>.<machine>.heartbeat every HeartbeatEvery, with a
//     deterministic event id (HeartbeatID). One goroutine and one timer run
//     every machine's boot and heartbeats, so 10,000 machines cost 10,000
//     heap entries.
//   - Stop and start keep the machine's identity (provider id, addresses)
//     and stop and resume its heartbeats; reboot pauses them for the boot
//     delay.
//   - Cluster infrastructure is a record too: ready at once, with the
//     control-plane endpoint 127.0.0.1:<port>, the port deterministic per
//     cluster (30000..59999). Nothing listens on it.
//   - Failure injection: CreateFailureRate makes creates fail for good
//     (InfraMachine Failed); VanishRate/VanishAfter make machines disappear
//     later (drift: the SDK reports Gone). Which machines fail or vanish,
//     boot jitter and heartbeat phases all follow from Seed and the
//     machine's name, so a run can be replayed.
//   - A test hook: the command capn.provider.sim.machine.vanish.<c>.<m>
//     (TypeVanish, data DeleteMachine) makes a machine vanish at once.
//
// The node's kubelet version is kept in the record's message ("... kubelet
// v1.33.1"), because InfraMachine has no field for it and the record is
// the sim's only persistence.
package sim
