// Package k8s holds myelin's Kubernetes plumbing that is not specific to one component:
// installing its CRDs, reading its custom resources through the dynamic client, and
// small readers of core objects (a Node's InternalIP, a pod's readiness).
package k8s
