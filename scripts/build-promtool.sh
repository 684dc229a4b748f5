#!/usr/bin/env bash
# build-promtool.sh builds the pinned promtool (Prometheus' own linter: `promtool check
# metrics` is the scraper check of the metric endpoints in the e2e tests) from the
# Prometheus Go module into "$MYELIN_CACHE/prometheus/<version>/bin". `go install
# .../cmd/promtool@<version>` is refused because Prometheus' go.mod has exclude
# directives, so the build goes through a throwaway wrapper module that requires the
# pinned module (a dependency's excludes do not apply). A binary already built is
# reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=pinned-build.sh
. "$here/pinned-build.sh"

# The Prometheus Go module's v0.X.Y tags are Prometheus v3.X.Y releases;
# internal/promtool.Version must say the same (a test checks they agree).
PROMETHEUS_MODULE_VERSION=v0.307.3

# build_promtool builds promtool into $GOBIN (pinned_build's scratch directory) through
# the wrapper module, written there too; a subshell, so its cd stays in it.
build_promtool() (
	cd "$GOBIN"
	wrapper_module promtoolbuild
	cat >tools.go <<'SRC'
//go:build tools

// Package promtoolbuild only pins the Prometheus module for building promtool.
package promtoolbuild

import _ "github.com/prometheus/prometheus/cmd/promtool"
SRC
	GOFLAGS=-mod=mod go get "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$GOBIN/promtool" \
		github.com/prometheus/prometheus/cmd/promtool
)

pinned_build promtool "$PROMETHEUS_MODULE_VERSION" "$MYELIN_CACHE/prometheus/$PROMETHEUS_MODULE_VERSION/bin" \
	"a few minutes" build_promtool
