// Package deploy holds the manifests myelin installs into a cluster: its CRDs today,
// the agent's DaemonSet and RBAC for real clusters later.
package deploy

import "embed"

// CRDs are the CustomResourceDefinitions, one YAML document per file.
//
//go:embed crds/*.yaml
var CRDs embed.FS
