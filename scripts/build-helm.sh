#!/usr/bin/env bash
# build-helm.sh builds the pinned Helm (the chart's lint and template gates, and installing
# the chart on a lab) with `go install helm.sh/helm/v3/cmd/helm@<version>` from the Go
# module proxy into "$MYELIN_CACHE/helm/<version>/bin" (HELM_BIN_DIR in versions.sh).
# A binary already built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=pinned-build.sh
. "$here/pinned-build.sh"

# The ldflags set what `helm version` prints (otherwise it reports a development build).
pinned_build helm "$HELM_VERSION" "$HELM_BIN_DIR" "about a minute" \
	env CGO_ENABLED=0 go install -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
	"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
