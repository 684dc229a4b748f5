package endpoint

import (
	"crypto/sha256"
	"encoding/hex"
)

// HostIfName is the name of a pod's host-side veth: "myl" and 11 hex characters of a
// hash of the container id (15 characters, the kernel's limit).
func HostIfName(containerID string) string {
	sum := sha256.Sum256([]byte(containerID))
	return "myl" + hex.EncodeToString(sum[:])[:11]
}
