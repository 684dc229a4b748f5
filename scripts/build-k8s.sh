#!/usr/bin/env bash
# build-k8s.sh builds the pinned Kubernetes binaries from the k8s.io/kubernetes Go module
# (via the Go module proxy) into "$MYELIN_CACHE/kubernetes/<version>/bin". A wrapper module
# pins every staging module k8s.io/X to its v0.Y.Z release, which is how k8s.io/kubernetes
# is consumed outside its own repository. A binary already built for the version is reused.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=kube-wrapper.sh
. "$here/kube-wrapper.sh"

say() { printf 'setup: %s\n' "$*"; }

missing=()
for b in "${KUBE_BINARIES[@]}"; do
	[ -x "$KUBE_BIN_DIR/$b" ] || missing+=("$b")
done
if [ "${#missing[@]}" -eq 0 ]; then
	say "kubernetes $KUBE_VERSION: cached in $KUBE_BIN_DIR"
	exit 0
fi

wrapper="$MYELIN_CACHE/kubernetes/$KUBE_VERSION/src"
mkdir -p "$wrapper" "$KUBE_BIN_DIR"
say "building kubernetes $KUBE_VERSION (${missing[*]}) from the Go module proxy into $KUBE_BIN_DIR"
say "the first build downloads ~1 GB of modules and compiles for 10-20 minutes on 2 cores; later runs reuse the cache"

cd "$wrapper"
if [ ! -f go.mod ]; then
	kube_wrapper_gomod myelin.local/kubernetes-build
fi
# One blank import per binary, so the wrapper's go.sum covers each; a binary added to
# KUBE_BINARIES later (kubelet) is picked up by an existing wrapper too.
{
	printf '//go:build tools\n\npackage tools\n\nimport (\n'
	for b in "${KUBE_BINARIES[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
	printf ')\n'
} >tools.go.tmp
if ! cmp -s tools.go.tmp tools.go; then
	mv tools.go.tmp tools.go
	GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
else
	rm -f tools.go.tmp
fi

ldflags=$(kube_ldflags)
for b in "${missing[@]}"; do
	say "  go build $b"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN_DIR/$b.tmp" "k8s.io/kubernetes/cmd/$b"
	mv "$KUBE_BIN_DIR/$b.tmp" "$KUBE_BIN_DIR/$b"
done
"$KUBE_BIN_DIR/kube-apiserver" --version
