package endpoint

import "github.com/myelin-net/myelin/internal/api"

// HostIfName is the name of a pod's host-side veth: "myl" and 11 hex characters of a
// hash of the container id (15 characters, the kernel's limit); see api.HostIfName.
func HostIfName(containerID string) string { return api.HostIfName(containerID) }
