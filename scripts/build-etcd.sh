#!/usr/bin/env bash
# build-etcd.sh builds the pinned etcd server, the lab's Kubernetes store, from the etcd
# Go module into "$MYELIN_CACHE/etcd/<version>/bin". Debian bookworm's etcd (3.4.23) is
# older than Kubernetes v1.34 accepts for progress notifications: against it the
# apiserver turns RequestWatchProgress off, refuses every watch that asks for its initial
# events (which it makes of any watch from resourceVersion 0, as kwok's are) and serves
# consistent lists from etcd instead of its cache. `go install go.etcd.io/etcd/server/v3@...`
# is refused because etcd's go.mod has replace directives, so the build goes through a
# throwaway wrapper module that requires the pinned module (a dependency's replaces do
# not apply). internal/lab.EtcdVersion must say the same version (a test checks they
# agree). A binary already built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=pinned-build.sh
. "$here/pinned-build.sh"

# build_etcd builds etcd into $GOBIN (pinned_build's scratch directory) through the
# wrapper module, written there too; a subshell, so its cd stays in it.
build_etcd() (
	cd "$GOBIN"
	wrapper_module etcdbuild
	GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$GOBIN/etcd" go.etcd.io/etcd/server/v3
)

pinned_build etcd "$ETCD_VERSION" "$ETCD_BIN_DIR" "about a minute" build_etcd
