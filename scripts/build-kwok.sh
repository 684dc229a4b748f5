#!/usr/bin/env bash
# build-kwok.sh builds the pinned kwok (Kubernetes WithOut Kubelet: it simulates nodes and
# their pods against a real apiserver, the scale simulation of `myelin bench --cases
# 'kwok-scale/*'` and its e2e test) with `go install sigs.k8s.io/kwok/cmd/kwok@<version>`
# from the Go module proxy into "$MYELIN_CACHE/kwok/<version>/bin". The version must be
# internal/kwok.Version's (a test checks they agree). A binary already built is reused;
# safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

KWOK_VERSION=v0.7.0
bin_dir="$MYELIN_CACHE/kwok/$KWOK_VERSION/bin"

say() { printf 'setup: %s\n' "$*"; }

bin="$bin_dir/kwok"
if [ -x "$bin" ]; then
	say "kwok $KWOK_VERSION: cached in $bin_dir"
	exit 0
fi

say "building kwok $KWOK_VERSION from the Go module proxy into $bin_dir (a few minutes the first time)"
mkdir -p "$bin_dir"
# Build into a scratch GOBIN and move the binary into place, so an interrupted build
# never leaves a half-written binary in the cache.
tmp=$(mktemp -d "$bin_dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
mv "$tmp/kwok" "$bin"
say "kwok $KWOK_VERSION: built $bin"
