// Package e2e holds the end-to-end tests: each brings up a lab with `myelin lab up`,
// drives it through the real Kubernetes API and real clients, and tears it down,
// checking that nothing named myelin-* is left. They need root; without it they skip.
package e2e
