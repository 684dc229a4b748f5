// Package deploy holds the CRDs the lab installs (internal/k8s.EnsureCRDs). The Helm
// chart for real clusters (install/helm/myelin) ships the same files in its crds/
// directory; test/install checks that they are equal.
package deploy

import "embed"

// CRDs are the CustomResourceDefinitions, one YAML document per file.
//
//go:embed crds/*.yaml
var CRDs embed.FS
