#!/usr/bin/env bash
# build-flannel.sh builds the pinned Flannel (a peer CNI for `myelin bench`) with
# `go install github.com/flannel-io/flannel@<version>` from the Go module proxy into
# "$MYELIN_CACHE/flannel/<version>/bin". Later releases pull modules the proxy refuses, so
# the version stays pinned in versions.sh. A binary already built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=pinned-build.sh
. "$here/pinned-build.sh"

# cgo stays on: flannel's UDP backend is written in C and the build fails without it.
pinned_build flannel "$FLANNEL_VERSION" "$MYELIN_CACHE/flannel/$FLANNEL_VERSION/bin" "a few minutes" \
	go install -trimpath \
	-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" \
	"github.com/flannel-io/flannel@$FLANNEL_VERSION"
