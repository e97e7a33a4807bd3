package capi

import (
	"fmt"
	"slices"
	"strings"
)

// Every reason a Note gives is in this file, so that one kind of drop
// reads the same wherever it happens: the field reasons (by path), the
// reasons for whole objects, and the reasons the conversion gives as it
// reads.

// reasons explain why a field is not mapped, by the first key its path
// contains (more specific keys first). The default says capn has no
// equivalent.
var reasons = []struct{ key, reason string }{
	{"metadata.namespace", reasonNamespace},
	{"contentFrom", reasonSecret},
	{"nodeRegistration.criSocket", "capn's kubeadm bootstrap uses kubeadm's default CRI socket"},
	{"nodeRegistration.name", "capn names nodes after their machines"},
	{"clusterConfiguration", "capn's kubeadm bootstrap writes the ClusterConfiguration itself (endpoint, certificates, networking from spec.network)"},
	{"initConfiguration", "capn's kubeadm bootstrap writes the InitConfiguration itself"},
	{"joinConfiguration", "capn's kubeadm bootstrap writes the JoinConfiguration itself"},
	{"users", "capn's bootstrap creates no users: add them with files or preCommands"},
	{"ntp", "capn's bootstrap has no NTP settings: configure them with files or preCommands"},
	{"mounts", "capn's bootstrap mounts nothing: use preCommands"},
	{"diskSetup", "capn's bootstrap sets up no disks: use preCommands"},
	{"bootCommands", "capn's bootstrap has no boot commands: use preCommands"},
	{"ignition", "capn's kubeadm bootstrap renders format: ignition itself; additional Ignition config is not merged in: use files"},
	{"format", "capn's kubeadm bootstrap writes cloud-config or ignition"},
	{"verbosity", "capn's kubeadm bootstrap sets kubeadm's verbosity itself"},
	{"controlPlaneEndpoint", "capn's provider assigns the control-plane endpoint"},
	{"apiServerPort", "capn's provider assigns the control-plane endpoint and port"},
	{"clusterNetwork", "capn's network has pod and service CIDRs and a service domain only"},
	{"rolloutAfter", "capn rolls machines out on spec changes only"},
	{"rollout.after", "capn rolls machines out on spec changes only"},
	{"rollout.before", "capn renews certificates by rolling machines on spec changes only"},
	{"rolloutBefore", "capn renews certificates by rolling machines on spec changes only"},
	{"remediationTemplate", "capn remediates by replacing machines; there are no remediation templates"},
	{"remediation.templateRef", "capn remediates by replacing machines; there are no remediation templates"},
	{"remediation", "capn's remediation is set by the health policy (maxUnhealthy, maxInFlight)"},
	{"Drain", "capn has no drain settings"},
	{"Detach", "capn has no volume detach settings"},
	{"Deletion", "capn has no node deletion timeout"},
	{"deletion", "capn has no node drain, volume detach or deletion timeouts"},
	{"machineNaming", reasonNaming},
	{"namingStrategy", reasonNaming},
	{".naming", reasonNaming},
	{"minReadySeconds", "capn counts a machine available when its node is ready"},
	{"readinessGates", "capn counts a machine available when its node is ready"},
	{"progressDeadlineSeconds", "capn reports a stuck rollout through conditions, without a deadline"},
	{"revisionHistoryLimit", "capn keeps no machine sets"},
	{"template.metadata.annotations", "capn puts no annotations on machines"},
	{"controlPlane.metadata", "capn puts no labels or annotations on control-plane machines"},
	{"].metadata.annotations", "capn puts no annotations on machines"}, // a topology's or class's worker
	{"metadata.labels", "labels of Cluster API objects other than the Cluster have no meaning in capn"},
	{"metadata.annotations", "annotations of Cluster API objects other than the Cluster have no meaning in capn"},
	{"taints", "capn taints a pool's nodes from its KubeadmConfigTemplate's nodeRegistration.taints only"},
	{"availabilityGates", "capn's Ready condition has fixed inputs"},
	{"failureDomains", "capn's provider chooses failure domains"},
	{"paused", "capn pauses whole clusters only (spec.paused)"},
	{"kubernetesVersions", "capn takes any Kubernetes version its bootstrap supports"},
	{"upgrade", "capn upgrades the control plane one minor version at a time, without hooks"},
}

// Reasons the conversion gives as it reads.
const (
	reasonSecret            = "the content comes from a Secret, which capn cannot read: inline it with content, or name a bootstrap secret's key with secretRef"
	reasonAppend            = "capn writes whole files; it cannot append"
	reasonTaint             = "a taint needs a key and an effect"
	reasonInitArgs          = "capn gives every control-plane machine the joinConfiguration's kubelet arguments; these differ"
	reasonCPStrategy        = "capn's control plane always rolls one machine at a time (RollingUpdate)"
	reasonCPSurge           = "capn's control plane surges by 0 or 1 machine; left to the default (1)"
	reasonCPTaints          = "capn's control plane has no taint settings; kubeadm taints control-plane nodes itself"
	reasonPoolStrategy      = "capn's pools roll out with RollingUpdate or OnDelete"
	reasonDeletionOrder     = "capn's deletion orders are Random, Newest and Oldest"
	reasonMaxInFlight       = "capn's health policy limits remediations in flight by a count, not a percentage"
	reasonSelector          = "capn import resolves selectors by matchLabels (and control-plane Exists) only; this requirement is ignored"
	reasonCPHealth          = "capn's control plane takes the cluster's health policy (spec.health), which also applies to pools without their own"
	reasonMachineConditions = "capn checks node conditions only; its machines' own conditions drive the planner, not remediation"
	reasonRangeWins         = "overridden by the unhealthy range, as in Cluster API"
	reasonCountOrPercent    = "must be a count or a percentage"
	reasonCondition         = "a condition needs a type and a status True, False or Unknown"
	reasonDuration          = "must be a duration such as 10m"

	reasonNamespace    = "capn has no namespaces: a cluster's name is unique in capn"
	reasonNaming       = "capn names machines <cluster>-<pool>-<hash>-<n>"
	reasonMachinePools = "capn has no machine pools: declare a worker pool instead"
	reasonInfra        = "capn's provider makes the cluster's infrastructure without settings from the manifest"
)

// What a reference to an object the input lacks means, after
// reasonMissing's "not in the input: ".
const (
	missingInfra         = "its settings are not imported"
	missingParameters    = "the machines get no provider parameters"
	missingCPBootstrap   = "the control plane gets capn's default kubeadm bootstrap"
	missingPoolBootstrap = "the pool gets capn's default kubeadm bootstrap"
)

func reasonMissing(what string) string { return "not in the input: " + what }

func reasonBadBase64(err error) string {
	return "encoding base64 but the content does not decode: " + err.Error()
}

func reasonEncoding(enc string) string {
	return "capn writes plain or base64 content; encoding " + enc + " is not supported"
}

func reasonBootstrapKind(kind string) string {
	return "capn's bootstrap is kubeadm or script: bootstrap kind " + kind + " is not imported"
}

func reasonProviderReplaced(known, provider string) string {
	return fmt.Sprintf("provider %s (from the kind) replaced by %s (--provider)", known, provider)
}

// reasonFor explains why the field at path of o was not mapped.
func reasonFor(o *object, path string) string {
	if strings.HasPrefix(path, "spec") && o.group() == GroupInfra &&
		(strings.HasSuffix(o.kind, "Cluster") || strings.HasSuffix(o.kind, "ClusterTemplate")) {
		return reasonInfra
	}
	for _, r := range reasons {
		if strings.Contains(path, r.key) {
			return r.reason
		}
	}
	return "capn has no equivalent"
}

// leftoverReason says why an object the cluster does not use is not
// imported.
func (c *converter) leftoverReason(o *object) string {
	switch {
	case o.kind == "Cluster" && o.group() == GroupCore:
		return "another cluster: not imported (capn import makes one capn Cluster; pick it with --cluster)"
	case o.kind == "ClusterClass" && o.group() == GroupCore:
		if c.className == "" {
			return "not imported: cluster " + c.name + " does not use a ClusterClass"
		}
		return "not imported: cluster " + c.name + " uses ClusterClass " + c.className + ", not this one"
	case slices.Contains([]string{"MachineDeployment", "MachineHealthCheck", "KubeadmControlPlane"}, o.kind):
		return "not imported: it does not belong to cluster " + c.name
	case o.kind == "MachinePool":
		return "not imported: " + reasonMachinePools
	case o.kind == "ClusterResourceSetBinding":
		return "not imported: the addon-manager records which add-on sets are applied to which cluster itself (capn get addonsets)"
	}
	if why := c.classUse(o); why != "" {
		return "not imported: " + why
	}
	if strings.HasSuffix(o.group(), GroupCore) {
		return "not imported: nothing of cluster " + c.name + " references it"
	}
	return "not imported: not a Cluster API object capn reads"
}

// reasonSlot says why a template a ClusterClass references is not
// imported: what of the class uses it, and why that is not imported.
func (c *converter) reasonSlot(cc *object, s classSlot) string {
	switch {
	case cc != c.class:
		return fmt.Sprintf("used by ClusterClass %s, which cluster %s does not use", cc.name, c.name)
	case s.pool:
		return fmt.Sprintf("used by ClusterClass %s for %s, which capn does not import: %s", cc.name, s.what, reasonMachinePools)
	case s.class != "" && !c.usedClasses[s.class]:
		return fmt.Sprintf("used by ClusterClass %s for %s, which no machine deployment of cluster %s uses", cc.name, s.what, c.name)
	}
	return fmt.Sprintf("used by ClusterClass %s for %s, which capn does not import", cc.name, s.what)
}

// reasonUnusedClass is the note on a machine deployment class no pool uses.
func (c *converter) reasonUnusedClass() string {
	return "no machine deployment of cluster " + c.name + " uses this class"
}

// reasonClassMissing is the note on a topology whose ClusterClass is not in
// the input.
func reasonClassMissing(class string) string {
	return "ClusterClass " + class + " is not in the input: its templates, variables, patches and health checks are not imported (add it to the input to import them)"
}

// reasonVariable is the note on a ClusterClass variable, its definition or
// a topology's value.
func reasonVariable(name string) string {
	return "variable " + name + ": capn cannot evaluate ClusterClass patches, which are what read variables: set what it stands for in the capn manifest"
}

// reasonPatch is the note on a ClusterClass patch.
func reasonPatch(name, targets string) string {
	return "patch " + name + ": capn cannot evaluate ClusterClass patches: what it changes (" + targets + ") is not applied"
}

// reasonFailureDomain is the note on a failure domain whose definition is
// not imported.
func reasonFailureDomain(fd, definedIn string, defined bool) string {
	where := " is defined in "
	if !defined {
		where = " is not among those defined in "
	}
	return "dropped: failure domain " + fd + where + definedIn + ", which capn does not import (capn's provider offers its own failure domains): set template.failureDomain to one of the provider's"
}

// reasonHealthOverridden is the note on a ClusterClass health check the
// topology replaces or disables.
func reasonHealthOverridden(cl *object, path string, disabled bool) string {
	if disabled {
		return "disabled by " + cl.ref() + " " + path + ".enabled: false"
	}
	return "replaced by " + cl.ref() + " " + path + ", as in Cluster API"
}

// reasonSelectsNothing is the note on a MachineHealthCheck that selects no
// machine of the cluster: none of its settings applies to anything.
func (c *converter) reasonSelectsNothing(why string) string {
	return "not applied: it selects no machine of cluster " + c.name + " (" + why + ")"
}

// reasonHealthTaken is the note on a MachineHealthCheck whose target
// already has a health policy.
func reasonHealthTaken(what, from string) string {
	return "not applied to " + what + ": it already has the health policy of " + from
}

// reasonSecretRef: a file's contentFrom.secret imported as a secretRef to
// the bootstrap secret of that name, which the user stores.
func reasonSecretRef(name, key string) string {
	return fmt.Sprintf("imported as secretRef {name: %s, key: %s}: store the Secret's decoded value with capn bootstrap-secret set %s --from-file %s=FILE (the machines wait for it)", name, key, name, key)
}

// Why a ClusterClass variable does not map with Options.Classes
// (topoclass.go): whyNoPatch leaves the note of the flat import.
const (
	whyNoPatch       = "no patch sets a field capn has"
	whyVariablePatch = "read by a patch that sets what capn does not have"
)

// whyVariableType: a variable of a schema type capn has no variables of.
func whyVariableType(typ string) string {
	return fmt.Sprintf("schema type %q: capn variables are string, integer or boolean", typ)
}

// reasonClassVariable is the note on a class variable that does not map.
func reasonClassVariable(name, why string) string { return "variable " + name + ": " + why }

// reasonTopologyPoolOwn is the note on a topology machine deployment with
// settings of its own, which a capn topology pool cannot carry.
func reasonTopologyPoolOwn(class string) string {
	return "its own settings (labels, failure domain, rollout, health check) are not imported: a capn topology pool sets only its name, class and replicas; pool class " + class + " gives the rest"
}
