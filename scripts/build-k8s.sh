#!/usr/bin/env bash
# build-k8s.sh builds the pinned Kubernetes binaries from the k8s.io/kubernetes Go module
# (via the Go module proxy) into "$MYELIN_CACHE/kubernetes/<version>/bin". A wrapper module
# pins every staging module k8s.io/X to its v0.Y.Z release, which is how k8s.io/kubernetes
# is consumed outside its own repository. A binary already built for the version is reused.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

missing=()
for b in "${KUBE_BINARIES[@]}"; do
	[ -x "$KUBE_BIN_DIR/$b" ] || missing+=("$b")
done
if [ "${#missing[@]}" -eq 0 ]; then
	say "kubernetes $KUBE_VERSION: cached in $KUBE_BIN_DIR"
	exit 0
fi

staging_version="v0.${KUBE_VERSION#v1.}"
wrapper="$MYELIN_CACHE/kubernetes/$KUBE_VERSION/src"
mkdir -p "$wrapper" "$KUBE_BIN_DIR"
say "building kubernetes $KUBE_VERSION (${missing[*]}) from the Go module proxy into $KUBE_BIN_DIR"
say "the first build downloads ~1 GB of modules and compiles for 10-20 minutes on 2 cores; later runs reuse the cache"

cd "$wrapper"
if [ ! -f go.mod ]; then
	# The staging modules k8s.io/kubernetes replaces with ./staging/... paths.
	modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
	{
		echo "module myelin.local/kubernetes-build"
		echo
		echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		echo "replace ("
		sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$modfile"
		echo ")"
	} >go.mod.tmp
	mv go.mod.tmp go.mod
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

minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
for b in "${missing[@]}"; do
	say "  go build $b"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN_DIR/$b.tmp" "k8s.io/kubernetes/cmd/$b"
	mv "$KUBE_BIN_DIR/$b.tmp" "$KUBE_BIN_DIR/$b"
done
"$KUBE_BIN_DIR/kube-apiserver" --version
