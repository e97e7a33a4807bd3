package annotations

import (
	"slices"
	"testing"
)

func TestHooksAreTheNamesUnderThePrefixSorted(t *testing.T) {
	a := map[string]string{
		PreDrainHookPrefix + "backup":      "velero",
		PreDrainHookPrefix + "audit":       "ci",
		PreDrainHookPrefix:                 "no name: not a hook",
		PreTerminateHookPrefix + "storage": "csi",
		"capn.dev/pool":                    "workers",
	}
	if got := Hooks(a, PreDrainHookPrefix); !slices.Equal(got, []string{"audit", "backup"}) {
		t.Errorf("pre-drain hooks = %v", got)
	}
	if got := Hooks(a, PreTerminateHookPrefix); !slices.Equal(got, []string{"storage"}) {
		t.Errorf("pre-terminate hooks = %v", got)
	}
	if !IsHook(PreTerminateHookPrefix+"storage") || IsHook("capn.dev/pool") || IsHook(ExcludeNodeDraining) {
		t.Error("IsHook misjudges a key")
	}
	if !IsHeld(DeleteMachine) || !IsHeld(PreDrainHookPrefix+"backup") || IsHeld(ExcludeNodeDraining) || IsHeld("capn.dev/unhealthy") {
		t.Error("IsHeld misjudges a key")
	}
}
