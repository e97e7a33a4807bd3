package keys

import "strings"

// A machine's NATS identity. Node agents (capn-node, capn-npd-bridge) log
// in as the user machine.<cluster>.<machine>; the bootstrapper's auth
// callout checks the password against the machine's sealed record and
// grants only that machine's own subjects (docs/security.md §1).
const MachineUserPrefix = "machine."

// MachineUser is the NATS user name machine <cluster>/<machine> logs in as.
func MachineUser(cluster, machine string) string {
	return MachineUserPrefix + cluster + "." + machine
}

// ParseMachineUser splits a MachineUser name; it refuses anything else,
// and names holding a wildcard, a space or an empty token.
func ParseMachineUser(user string) (cluster, machine string, ok bool) {
	rest, found := strings.CutPrefix(user, MachineUserPrefix)
	if !found {
		return "", "", false
	}
	cluster, machine, found = strings.Cut(rest, ".")
	if !found || cluster == "" || machine == "" || strings.ContainsAny(rest, "*> \t\r\n") || strings.Contains(machine, ".") {
		return "", "", false
	}
	return cluster, machine, true
}

// MachineInboxPrefix is the reply-subject prefix a machine's connection
// uses (nats.CustomInboxPrefix): the only subjects it may subscribe to.
func MachineInboxPrefix(cluster, machine string) string {
	return "_INBOX_machine." + cluster + "." + machine
}
