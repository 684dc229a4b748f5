// Package version holds myelin's version, set at build time by the Makefile
// (-ldflags -X github.com/myelin-net/myelin/internal/version.Version=...) from
// `git describe --tags --always --dirty`. It also tags the locally built images
// (internal/images), so a lab imports the images of the binaries it runs.
package version

// Version is the build's version; "dev" when built without the Makefile.
var Version = "dev"

// BuildTags are the build tags every myelin binary is built with (the Makefile's
// GOTAGS, and the test suites that build the commands themselves).
//
// grpcnotrace leaves golang.org/x/net/trace out of gRPC. Its init registers
// /debug/requests on the default HTTP mux, which links html/template, and a template
// looks methods up by name at run time, so the linker then keeps every exported
// method of every type in the binary: the agent was 83 MB instead of 53 MB, and its
// resident memory grows with the binary (docs/scale.md, "Memory with 10,000
// Services"). gRPC traces are off unless grpc.EnableTracing is set, which myelin
// never does.
const BuildTags = "grpcnotrace"
