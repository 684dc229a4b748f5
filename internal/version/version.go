// Package version holds myelin's version, set at build time by the Makefile
// (-ldflags -X github.com/myelin-net/myelin/internal/version.Version=...) from
// `git describe --tags --always --dirty`. It also tags the locally built images
// (internal/images), so a lab imports the images of the binaries it runs.
package version

// Version is the build's version; "dev" when built without the Makefile.
var Version = "dev"
