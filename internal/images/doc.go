// Package images builds the images a lab with real nodes (--runtime containerd) runs,
// locally and reproducibly, as archives that `ctr images import` accepts: the agent
// (myelin binaries on a Debian base with the tools the agent execs), the pause image
// (cmd/myelin-pause) and the test image (Debian's busybox-static and myelin, for the
// probes tests run in pods). Images are assembled with go-containerregistry; every
// timestamp is fixed (Epoch), so the same inputs give the same archive. No registry is
// named or contacted: a ref like myelin/agent:v1 is normalised by containerd itself.
package images
