#!/usr/bin/env bash
# build-e2e.sh builds what `make conformance` and the lab's cluster DNS need, each reused
# when already built:
#   - Kubernetes' own end-to-end suite and its test server from the pinned k8s.io/kubernetes
#     Go module into "$KUBE_BIN_DIR": e2e.test (go test -c k8s.io/kubernetes/test/e2e) and
#     agnhost (test/images/agnhost), with the same wrapper module as build-k8s.sh (staging
#     modules pinned to their v0.Y.Z releases) in its own directory, blank-importing both;
#   - CoreDNS from its Go module into "$COREDNS_BIN_DIR";
#   - the Debian base of the agnhost image (mmdebstrap) in "$MYELIN_CACHE/images/base/";
#   - the suite's nginx image's Debian base (nginx-light, mmdebstrap) in the same place.
# `myelin images build --e2e` layers the binaries on top into image archives.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

build_coredns() {
	if [ -x "$COREDNS_BIN_DIR/coredns" ]; then
		say "coredns $COREDNS_VERSION: cached in $COREDNS_BIN_DIR"
		return
	fi
	say "building coredns $COREDNS_VERSION from the Go module proxy into $COREDNS_BIN_DIR"
	mkdir -p "$COREDNS_BIN_DIR"
	CGO_ENABLED=0 GOBIN="$COREDNS_BIN_DIR" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
}

build_agnhost_base() {
	local dir="$MYELIN_CACHE/images/base" out="$MYELIN_CACHE/images/base/$AGNHOST_BASE_NAME.tar"
	if [ -s "$out" ]; then
		say "agnhost image base: cached in $out"
		return
	fi
	mkdir -p "$dir"
	say "building the agnhost image's Debian base ($AGNHOST_BASE_PACKAGES) with mmdebstrap into $out"
	SOURCE_DATE_EPOCH=$IMAGE_EPOCH mmdebstrap --quiet --variant=essential \
		--include="$AGNHOST_BASE_PACKAGES" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		bookworm "$dir/tmp-$AGNHOST_BASE_NAME.tar" http://deb.debian.org/debian </dev/null
	mv "$dir/tmp-$AGNHOST_BASE_NAME.tar" "$out"
}

# The suite's nginx image (imageutils.Nginx; EndpointSlice tests run it): Debian's
# nginx-light, serving port 80. internal/images.NginxBaseName.
NGINX_BASE_PACKAGES=nginx-light
NGINX_BASE_NAME=debian-bookworm-nginx-light

build_nginx_base() {
	local dir="$MYELIN_CACHE/images/base" out="$MYELIN_CACHE/images/base/$NGINX_BASE_NAME.tar"
	if [ -s "$out" ]; then
		say "nginx image base: cached in $out"
		return
	fi
	mkdir -p "$dir"
	say "building the nginx image's Debian base ($NGINX_BASE_PACKAGES) with mmdebstrap into $out"
	SOURCE_DATE_EPOCH=$IMAGE_EPOCH mmdebstrap --quiet --variant=essential \
		--include="$NGINX_BASE_PACKAGES" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		bookworm "$dir/tmp-$NGINX_BASE_NAME.tar" http://deb.debian.org/debian </dev/null
	mv "$dir/tmp-$NGINX_BASE_NAME.tar" "$out"
}

build_coredns
build_agnhost_base
build_nginx_base
if [ -x "$KUBE_BIN_DIR/e2e.test" ] && [ -x "$KUBE_BIN_DIR/agnhost" ] && [ -s "$KUBE_BIN_DIR/agnhost-files/localhost.key" ] && [ -x "$KUBE_BIN_DIR/ginkgo" ]; then
	say "kubernetes e2e $KUBE_VERSION: cached in $KUBE_BIN_DIR (e2e.test, agnhost, ginkgo)"
	exit 0
fi

staging_version="v0.${KUBE_VERSION#v1.}"
wrapper="$MYELIN_CACHE/kubernetes/$KUBE_VERSION/e2e-src"
mkdir -p "$wrapper" "$KUBE_BIN_DIR"
say "building kubernetes $KUBE_VERSION e2e.test and agnhost from the Go module proxy into $KUBE_BIN_DIR"
say "e2e.test compiles for 3-10 minutes on 2 cores; later runs reuse it"

cd "$wrapper"
if [ ! -f go.mod ]; then
	modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
	{
		echo "module myelin.local/kubernetes-e2e-build"
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
	printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/test/e2e"\n\t_ "k8s.io/kubernetes/test/images/agnhost"\n)\n' >tools.go
	GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
fi

minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
if [ ! -x "$KUBE_BIN_DIR/agnhost" ]; then
	say "  go build agnhost"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN_DIR/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
	mv "$KUBE_BIN_DIR/agnhost.tmp" "$KUBE_BIN_DIR/agnhost"
fi
# The porter test server's TLS pair, which the agnhost image carries (its Dockerfile's ADD).
src=$(go list -mod=mod -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter
mkdir -p "$KUBE_BIN_DIR/agnhost-files"
install -m 0644 "$src/localhost.crt" "$src/localhost.key" "$KUBE_BIN_DIR/agnhost-files/"
if [ ! -x "$KUBE_BIN_DIR/e2e.test" ]; then
	say "  go test -c k8s.io/kubernetes/test/e2e"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go test -c -trimpath -ldflags "$ldflags" -o "$KUBE_BIN_DIR/e2e.test.tmp" k8s.io/kubernetes/test/e2e
	mv "$KUBE_BIN_DIR/e2e.test.tmp" "$KUBE_BIN_DIR/e2e.test"
fi
# The ginkgo CLI at the version e2e.test links, to run the suite in parallel.
if [ ! -x "$KUBE_BIN_DIR/ginkgo" ]; then
	say "  go build ginkgo"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$KUBE_BIN_DIR/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo
	mv "$KUBE_BIN_DIR/ginkgo.tmp" "$KUBE_BIN_DIR/ginkgo"
fi
say "kubernetes e2e $KUBE_VERSION: $(($(stat -c %s "$KUBE_BIN_DIR/e2e.test") / 1048576)) MiB e2e.test, agnhost, ginkgo in $KUBE_BIN_DIR"
