// Package config owns myelin's configuration keys (the table in docs/operations.md): their defaults, how each
// value is parsed and validated, and how the sources (built-in defaults, the
// myelin-config ConfigMap) are merged into one immutable Config with the source of
// every effective value. Parsing is pure; Load reads the sources from Kubernetes.
package config
