#!/usr/bin/env bash
# build-flannel.sh builds the pinned Flannel (a peer CNI for `myelin bench`) with
# `go install github.com/flannel-io/flannel@<version>` from the Go module proxy into
# "$MYELIN_CACHE/flannel/<version>/bin". Later releases pull modules the proxy refuses, so
# the version stays pinned in versions.sh. A binary already built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

FLANNEL_BIN_DIR="$MYELIN_CACHE/flannel/$FLANNEL_VERSION/bin"

bin="$FLANNEL_BIN_DIR/flannel"
if [ -x "$bin" ]; then
	say "flannel $FLANNEL_VERSION: cached in $FLANNEL_BIN_DIR"
	exit 0
fi

say "building flannel $FLANNEL_VERSION from the Go module proxy into $FLANNEL_BIN_DIR (a few minutes the first time)"
mkdir -p "$FLANNEL_BIN_DIR"
# go install writes the binary under its final name; build into a scratch GOBIN and move
# it into place so an interrupted build never leaves a half-written binary in the cache.
# cgo stays on: flannel's UDP backend is written in C and the build fails without it.
tmp=$(mktemp -d "$FLANNEL_BIN_DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" go install -trimpath \
	-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" \
	"github.com/flannel-io/flannel@$FLANNEL_VERSION"
mv "$tmp/flannel" "$bin"
say "flannel $FLANNEL_VERSION: built $bin"
