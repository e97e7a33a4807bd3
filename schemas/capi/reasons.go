package capi

import "strings"

// reasons explain why a field is not mapped, by the first key its path
// contains (more specific keys first). The default says capn has no
// equivalent.
var reasons = []struct{ key, reason string }{
	{"contentFrom", "capn cannot read Secrets: inline the content"},
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
	{"ignition", "capn's bootstrap writes cloud-config, not Ignition"},
	{"format", "capn's kubeadm bootstrap writes cloud-config"},
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
	{"machineNaming", "capn names machines <cluster>-<pool>-<hash>-<n>"},
	{"minReadySeconds", "capn counts a machine available when its node is ready"},
	{"readinessGates", "capn counts a machine available when its node is ready"},
	{"progressDeadlineSeconds", "capn reports a stuck rollout through conditions, without a deadline"},
	{"revisionHistoryLimit", "capn keeps no machine sets"},
	{"template.metadata.annotations", "capn puts no annotations on machines"},
	{"metadata.labels", "labels of Cluster API objects other than the Cluster have no meaning in capn"},
	{"metadata.annotations", "annotations of Cluster API objects other than the Cluster have no meaning in capn"},
	{"availabilityGates", "capn's Ready condition has fixed inputs"},
	{"failureDomains", "capn's provider chooses failure domains"},
	{"paused", "capn pauses whole clusters only (spec.paused)"},
	{"topology", "capn import reads the topology's version, replicas and pools only"},
}

// reasonFor explains why the field at path of o was not mapped.
func reasonFor(o *object, path string) string {
	if strings.HasPrefix(path, "spec") && strings.HasSuffix(o.kind, "Cluster") && o.group() == GroupInfra {
		return "capn's provider makes the cluster's infrastructure without settings from the manifest"
	}
	for _, r := range reasons {
		if strings.Contains(path, r.key) {
			return r.reason
		}
	}
	return "capn has no equivalent"
}
