#!/usr/bin/env bash
# build-helm.sh builds the pinned Helm (the chart's lint and template gates, and installing
# the chart on a lab) with `go install helm.sh/helm/v3/cmd/helm@<version>` from the Go
# module proxy into "$MYELIN_CACHE/helm/<version>/bin" (HELM_BIN_DIR in versions.sh).
# A binary already built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

bin="$HELM_BIN_DIR/helm"
if [ -x "$bin" ]; then
	say "helm $HELM_VERSION: cached in $HELM_BIN_DIR"
	exit 0
fi

say "building helm $HELM_VERSION from the Go module proxy into $HELM_BIN_DIR (about a minute the first time)"
mkdir -p "$HELM_BIN_DIR"
# Build into a scratch GOBIN and move the binary into place, so an interrupted build
# never leaves a half-written binary in the cache. The ldflags set what `helm version`
# prints (otherwise it reports a development build).
tmp=$(mktemp -d "$HELM_BIN_DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
	"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$tmp/helm" "$bin"
say "helm $HELM_VERSION: built $bin"
