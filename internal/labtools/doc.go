// Package labtools holds the small programs that lab pods and the lab's external host
// run as `myelin lab serve` and `myelin lab udp-flows`: an HTTP and UDP server that
// names itself and the client address it saw, and a checker of many concurrent UDP
// flows. They are tools for the tests and the demo, not part of the lab's lifecycle.
package labtools
