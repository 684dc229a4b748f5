#!/usr/bin/env bash
# build-hubble.sh builds the upstream hubble CLI (the Hubble API's acceptance client: e2e
# runs `hubble observe` and `hubble status` against the relay) from the cilium Go module at
# the pinned version into "$MYELIN_CACHE/hubble/<version>/bin" (HUBBLE_BIN_DIR in
# versions.sh). `go install …@version` refuses a module with replace directives, so a
# wrapper module requires github.com/cilium/cilium and carries its replaces, except its
# forked k8s.io/apimachinery, which the module proxy does not serve (the upstream release
# compiles). A binary already built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

bin="$HUBBLE_BIN_DIR/hubble"
if [ -x "$bin" ]; then
	say "hubble $HUBBLE_VERSION: cached in $HUBBLE_BIN_DIR"
	exit 0
fi

wrapper="$MYELIN_CACHE/hubble/$HUBBLE_VERSION/src"
mkdir -p "$wrapper" "$HUBBLE_BIN_DIR"
say "building hubble $HUBBLE_VERSION from the Go module proxy into $HUBBLE_BIN_DIR (a minute or two the first time)"

cd "$wrapper"
if [ ! -f go.mod ]; then
	modfile=$(go mod download -json "github.com/cilium/cilium@$HUBBLE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
	{
		echo "module myelin.local/hubble-build"
		echo
		echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")"
		echo
		echo "require github.com/cilium/cilium $HUBBLE_VERSION"
		echo
		# cilium's single-line replaces, without its k8s.io/apimachinery fork.
		grep '^replace ' "$modfile" | grep -v '^replace k8s.io/apimachinery ' || true
	} >go.mod.tmp
	printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/cilium/cilium/hubble"\n' >tools.go
	mv go.mod.tmp go.mod
	GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
fi

# Build to a temporary name and move it into place, so an interrupted build never leaves a
# half-written binary in the cache. The ldflag sets what `hubble version` prints.
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
	-ldflags "-s -w -X github.com/cilium/cilium/hubble/pkg.Version=${HUBBLE_VERSION#v}" \
	-o "$bin.tmp" github.com/cilium/cilium/hubble
mv "$bin.tmp" "$bin"
say "hubble $HUBBLE_VERSION: built $bin ($("$bin" version))"
