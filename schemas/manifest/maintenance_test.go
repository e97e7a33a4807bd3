package manifest

import (
	"errors"
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Every bad field of spec.maintenance and spec.hibernation is reported at
// once, each with its path (the manifest's camelCase names) and what is
// allowed; a valid one passes.
func TestValidateMaintenanceAndHibernation(t *testing.T) {
	c := valid()
	c.Spec.Maintenance = &capnv1.MaintenanceSpec{AutoPatch: true, PendingVersion: "v1.35.0", Windows: []*capnv1.MaintenanceWindow{
		{Days: []string{"Sat", "Sun"}, Start: "02:30", End: "04:00", TimeZone: "Europe/Berlin"}}}
	c.Spec.Hibernation = &capnv1.HibernationSpec{Schedules: []*capnv1.HibernationSchedule{
		{Start: "0 19 * * MON-FRI", End: "0 7 * * MON-FRI", Location: "Europe/Berlin"}}}
	if err := Validate(c); err != nil {
		t.Fatalf("valid maintenance and hibernation refused: %v", err)
	}

	c.Spec.Maintenance = &capnv1.MaintenanceSpec{PendingVersion: "v1.33.9", Windows: []*capnv1.MaintenanceWindow{
		{Days: []string{"Caturday"}, Start: "25:00", End: "04:00", TimeZone: "Europe/Atlantis"}}}
	c.Spec.Hibernation = &capnv1.HibernationSpec{Schedules: []*capnv1.HibernationSchedule{
		{Start: "0 19 * * MON-FRI", End: "0 7 * * XYZ"}, {Location: "UTC"}}}
	err := Validate(c)
	var got []string
	for _, e := range flatten(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("not a FieldError: %v", e)
		}
		got = append(got, fe.Error())
	}
	want := []string{
		`spec.maintenance.windows[0].days[0]: "Caturday" is not a day: want one of Mon, Tue, Wed, Thu, Fri, Sat, Sun`,
		`spec.maintenance.windows[0].start: "25:00" is not a time: want HH:MM, 00:00 to 23:59`,
		`spec.maintenance.windows[0].timeZone: "Europe/Atlantis" is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)`,
		`spec.maintenance.pendingVersion: "v1.33.9": older than spec.kubernetesVersion v1.34.2: Kubernetes can only be upgraded`,
		`spec.hibernation.schedules[0].end: day-of-week field "XYZ": "XYZ" is not a number (allowed: *, 0-7, ranges a-b, steps */n, lists a,b, SUN-SAT (0 and 7: Sunday))`,
		`spec.hibernation.schedules[1]: needs start (when to hibernate), end (when to wake) or both`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidateKubernetesVersions(t *testing.T) {
	kv := &capnv1.KubernetesVersions{ApiVersion: APIVersion, Kind: KindKubernetesVersions, Metadata: &capnv1.ObjectMeta{Name: "default"},
		Spec: &capnv1.KubernetesVersionsSpec{Versions: []*capnv1.KubernetesVersion{
			{Version: "v1.34.3", Classification: ClassSupported}, {Version: "v1.34.4", Classification: ClassPreview}, {Version: "v1.34.1"}}}}
	if err := ValidateKubernetesVersions(kv); err != nil {
		t.Fatal(err)
	}
	kv.Spec.Versions = append(kv.Spec.Versions, &capnv1.KubernetesVersion{Version: "1.34"}, &capnv1.KubernetesVersion{Version: "v1.34.3", Classification: "stable"})
	err := ValidateKubernetesVersions(kv)
	for _, w := range []string{
		`spec.versions[3].version: "1.34": must be vMAJOR.MINOR.PATCH`,
		`spec.versions[4].version: "v1.34.3": duplicate: spec.versions[0] lists it already`,
		`spec.versions[4].classification: "stable": must be one of supported, deprecated, preview`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
}

func TestNewestPatch(t *testing.T) {
	cat := &capnv1.KubernetesVersions{Spec: &capnv1.KubernetesVersionsSpec{Versions: []*capnv1.KubernetesVersion{
		{Version: "v1.34.2"}, {Version: "v1.34.5", Classification: ClassSupported}, {Version: "v1.34.6", Classification: ClassPreview},
		{Version: "v1.34.4", Classification: ClassDeprecated}, {Version: "v1.35.1"}, {Version: "v1.34.7-rc.1"}, {Version: "v1.33.9"}}}}
	tests := []struct {
		cur, want string
		ok        bool
	}{
		{"v1.34.2", "v1.34.5", true}, // not the preview, not the next minor
		{"v1.34.5", "", false},       // newest already
		{"v1.33.1", "v1.33.9", true},
		{"v1.32.0", "", false},
		{"bad", "", false},
	}
	for _, tt := range tests {
		if got, ok := NewestPatch(cat, tt.cur); got != tt.want || ok != tt.ok {
			t.Errorf("NewestPatch(%s) = %s, %v; want %s, %v", tt.cur, got, ok, tt.want, tt.ok)
		}
	}
}
