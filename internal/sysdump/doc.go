// Package sysdump is `myelin sysdump`: one .tar.gz for a bug report holding, from every
// node, the agent's status, configuration with provenance, Services, endpoints,
// NetworkPolicy state, recent drops, BPF maps (the first entries of each), programs and
// links, and the agent's log; and the cluster objects myelin reads (Nodes, Pods,
// Services, EndpointSlices, NetworkPolicies, NodeConfigs, the myelin ConfigMap).
// Secrets are never read; cluster objects lose env values, last-applied-configuration
// and managedFields (scrub); every file passes through Redact, which blanks values that
// look like tokens, keys or passwords (also base64-encoded ones and a Secret's data
// wherever one is embedded); the archive is mode 0600.
package sysdump
