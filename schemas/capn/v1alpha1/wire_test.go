package capnv1alpha1_test

import (
	"encoding/hex"
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestWireStrings pins every enum value to the string records held before
// the enums existed; a value added to a .proto fails here until it is
// listed.
func TestWireStrings(t *testing.T) {
	enum := func(names map[int32]string, vals map[int32]string, wire func(int32) string, of func(string) int32) {
		t.Helper()
		if len(names) != len(vals)+1 {
			t.Errorf("%v: %d values, the test lists %d: list the new ones", names, len(names)-1, len(vals))
		}
		if got := wire(0); got != "" {
			t.Errorf("UNSPECIFIED is %q on the wire, want \"\"", got)
		}
		for n, want := range vals {
			if got := wire(n); got != want {
				t.Errorf("%s is %q on the wire, want %q", names[n], got, want)
			}
			if got := of(want); got != n {
				t.Errorf("%q reads as %s, want %s", want, names[got], names[n])
			}
		}
		if got := of("NoSuchValue"); got != 0 {
			t.Errorf("an unknown string reads as %s, want UNSPECIFIED", names[got])
		}
	}
	enum(capnv1.MachinePhase_name, map[int32]string{
		int32(capnv1.MachinePending): "Pending", int32(capnv1.MachineBootstrapping): "Bootstrapping",
		int32(capnv1.MachineProvisioning): "Provisioning", int32(capnv1.MachineProvisioned): "Provisioned",
		int32(capnv1.MachineRunning): "Running", int32(capnv1.MachineStopped): "Stopped",
		int32(capnv1.MachineDeleting): "Deleting", int32(capnv1.MachineDeleted): "Deleted", int32(capnv1.MachineFailed): "Failed",
	}, func(n int32) string { return capnv1.MachinePhase(n).Wire() }, func(s string) int32 { return int32(capnv1.MachinePhaseOf(s)) })
	enum(capnv1.ClusterPhase_name, map[int32]string{
		int32(capnv1.ClusterPending): "Pending", int32(capnv1.ClusterProvisioning): "Provisioning",
		int32(capnv1.ClusterReady): "Ready", int32(capnv1.ClusterUpgrading): "Upgrading",
		int32(capnv1.ClusterScalingUp): "ScalingUp", int32(capnv1.ClusterScalingDown): "ScalingDown",
		int32(capnv1.ClusterDeleting): "Deleting", int32(capnv1.ClusterFailed): "Failed", int32(capnv1.ClusterPaused): "Paused",
		int32(capnv1.ClusterHibernating): "Hibernating", int32(capnv1.ClusterHibernated): "Hibernated",
		int32(capnv1.ClusterWaking): "Waking", int32(capnv1.ClusterDeleted): "Deleted",
	}, func(n int32) string { return capnv1.ClusterPhase(n).Wire() }, func(s string) int32 { return int32(capnv1.ClusterPhaseOf(s)) })
	enum(capnv1.InfraState_name, map[int32]string{
		int32(capnv1.InfraCreating): "Creating", int32(capnv1.InfraRunning): "Running", int32(capnv1.InfraStopped): "Stopped",
		int32(capnv1.InfraDeleting): "Deleting", int32(capnv1.InfraDeleted): "Deleted", int32(capnv1.InfraFailed): "Failed",
	}, func(n int32) string { return capnv1.InfraState(n).Wire() }, func(s string) int32 { return int32(capnv1.InfraStateOf(s)) })
	enum(capnv1.ConditionStatus_name, map[int32]string{
		int32(capnv1.ConditionTrue): "True", int32(capnv1.ConditionFalse): "False", int32(capnv1.ConditionUnknown): "Unknown",
	}, func(n int32) string { return capnv1.ConditionStatus(n).Wire() }, func(s string) int32 { return int32(capnv1.ConditionStatusOf(s)) })
}

// TestOldRecordsRead decodes bytes that capn wrote before the enums (the
// deterministic marshalling of main at b443914): they read as the typed
// values, and encode to the same bytes and the same JSON as before.
func TestOldRecordsRead(t *testing.T) {
	tests := []struct {
		name, hex, json string
		msg             proto.Message
		check           func(proto.Message) bool
	}{
		{
			name: "machine status", hex: "0a0b50726f766973696f6e6564121c0a055265616479120546616c73651a0c50726f766973696f6e696e67",
			json: `{"phase":"Provisioned","conditions":[{"type":"Ready","status":"False","reason":"Provisioning"}]}`,
			msg:  new(capnv1.MachineStatus),
			check: func(m proto.Message) bool {
				st := m.(*capnv1.MachineStatus)
				return st.GetPhaseValue() == capnv1.MachineProvisioned && st.GetConditions()[0].GetStatusValue() == capnv1.ConditionFalse
			},
		},
		{
			name: "cluster status", hex: "0a095363616c696e67557012100a0552656164791207556e6b6e6f776e",
			json: `{"phase":"ScalingUp","conditions":[{"type":"Ready","status":"Unknown"}]}`,
			msg:  new(capnv1.ClusterStatus),
			check: func(m proto.Message) bool {
				st := m.(*capnv1.ClusterStatus)
				return st.GetPhaseValue() == capnv1.ClusterScalingUp && st.GetConditions()[0].GetStatusValue() == capnv1.ConditionUnknown
			},
		},
		{
			name: "infra machine", hex: "0a0373696d120263311a026d31320753746f70706564",
			json:  `{"provider":"sim","cluster":"c1","machine":"m1","state":"Stopped"}`,
			msg:   new(capnv1.InfraMachine),
			check: func(m proto.Message) bool { return m.(*capnv1.InfraMachine).GetStateValue() == capnv1.InfraStopped },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(old, tt.msg); err != nil {
				t.Fatalf("an old record does not read: %v", err)
			}
			if !tt.check(tt.msg) {
				t.Errorf("read %v: not the typed values written", tt.msg)
			}
			again, err := proto.MarshalOptions{Deterministic: true}.Marshal(tt.msg)
			if err != nil || hex.EncodeToString(again) != tt.hex {
				t.Errorf("re-encoded %x (%v), want the old bytes %s", again, err, tt.hex)
			}
			j, err := protojson.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, j, tt.json) {
				t.Errorf("JSON %s, want %s", j, tt.json)
			}
		})
	}
}

// TestSetters: the typed setters write through the typed setters the same strings as before.
func TestSetters(t *testing.T) {
	var ms capnv1.MachineStatus
	ms.SetPhaseValue(capnv1.MachineRunning)
	var cs capnv1.ClusterStatus
	cs.SetPhaseValue(capnv1.ClusterHibernated)
	var im capnv1.InfraMachine
	im.SetStateValue(capnv1.InfraDeleting)
	if ms.Phase != "Running" || cs.Phase != "Hibernated" || im.State != "Deleting" {
		t.Errorf("wrote %q %q %q, want Running Hibernated Deleting", ms.Phase, cs.Phase, im.State)
	}
}

// jsonEqual compares protojson output, whose whitespace is unstable by design.
func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(a, b)
}
