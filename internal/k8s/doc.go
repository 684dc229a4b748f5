// Package k8s holds myelin's Kubernetes plumbing that is not specific to one component:
// installing its CRDs, and reading its custom resources through the dynamic client.
package k8s
