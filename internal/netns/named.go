package netns

import (
	"os"
	"path/filepath"
	"strings"
)

// Dir is where iproute2 (`ip netns add`) keeps named network namespaces.
const Dir = "/run/netns"

// Path returns the path of the named network namespace name.
func Path(name string) string { return filepath.Join(Dir, name) }

// Named lists the named network namespaces whose names start with prefix, such as a
// lab's or a bench's leftovers. A missing Dir means there are none.
func Named(prefix string) []string {
	var out []string
	entries, _ := os.ReadDir(Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}
