// Package kube is the agent's Kubernetes client: REST clients for the three API groups
// it reads and writes (core/v1, discovery.k8s.io/v1 and networking.k8s.io/v1) and
// nothing else.
//
// client-go's typed clientset and shared informer factory register every API group of
// k8s.io/api in their scheme (57 packages, with their typed clients and apply
// configurations), all linked and initialised in any program that uses them. The agent
// reads Nodes, Pods, Namespaces, Services, EndpointSlices, NetworkPolicies and its
// ConfigMap and writes Events; through this package it links those groups only, which
// keeps ~10 MiB of the binary's pages and init data out of its resident memory
// (docs/scale.md, "Memory with 10,000 Services"). cmd/myelin-agent's deps test keeps the
// full scheme out.
//
// Informers are plain cache.SharedIndexInformers over Client.ListWatch (NewInformer);
// package kubefake adapts a client-go clientset (the fake one in unit tests) to Client.
package kube
