// Package clusterdns runs cluster DNS in a cluster as real clusters do: CoreDNS (built
// from its Go module by make setup, scripts/build-e2e.sh) as the Deployment "coredns"
// behind the Service "kube-dns" in kube-system, at the address the kubelets' clusterDNS
// names. Objects decides the objects from Options (pure, unit-tested); Apply creates or
// updates them and Wait waits for a ready replica. `myelin lab dns` uses it on both lab
// runtimes: on --runtime containerd the pods run the image myelin/coredns (internal/images);
// on the lab runtime, whose pods are host programs, the Deployment's command is the host's
// CoreDNS binary reading a Corefile from the lab directory.
package clusterdns
