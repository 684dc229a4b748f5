#!/usr/bin/env bash
# build-e2e.sh builds what `make conformance` and the lab's cluster DNS need, each reused
# when already built:
#   - Kubernetes' own end-to-end suite and its test server from the pinned k8s.io/kubernetes
#     Go module into "$KUBE_BIN_DIR": e2e.test (go test -c k8s.io/kubernetes/test/e2e) and
#     agnhost (test/images/agnhost) and the Conntrack test's boom-server
#     (test/images/regression-issue-74839), with the same wrapper module as build-k8s.sh (staging
#     modules pinned to their v0.Y.Z releases) in its own directory, blank-importing both;
#   - CoreDNS from its Go module into "$COREDNS_BIN_DIR".
# `myelin images build --e2e` layers the binaries on top of the Debian bases
# build-image-bases.sh makes into image archives.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=kube-wrapper.sh
. "$here/kube-wrapper.sh"

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

build_coredns
if [ -x "$KUBE_BIN_DIR/e2e.test" ] && [ -x "$KUBE_BIN_DIR/agnhost" ] && [ -s "$KUBE_BIN_DIR/agnhost-files/localhost.key" ] && [ -x "$KUBE_BIN_DIR/ginkgo" ] && [ -x "$KUBE_BIN_DIR/regression-issue-74839" ]; then
	say "kubernetes e2e $KUBE_VERSION: cached in $KUBE_BIN_DIR (e2e.test, agnhost, regression-issue-74839, ginkgo)"
	exit 0
fi

wrapper="$MYELIN_CACHE/kubernetes/$KUBE_VERSION/e2e-src"
mkdir -p "$wrapper" "$KUBE_BIN_DIR"
say "building kubernetes $KUBE_VERSION e2e.test and agnhost from the Go module proxy into $KUBE_BIN_DIR"
say "e2e.test compiles for 3-10 minutes on 2 cores; later runs reuse it"

cd "$wrapper"
if [ ! -f go.mod ]; then
	kube_wrapper_gomod myelin.local/kubernetes-e2e-build
	printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/test/e2e"\n\t_ "k8s.io/kubernetes/test/images/agnhost"\n\t_ "k8s.io/kubernetes/test/images/regression-issue-74839"\n)\n' >tools.go
	GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
fi

ldflags=$(kube_ldflags)
if [ ! -x "$KUBE_BIN_DIR/agnhost" ]; then
	say "  go build agnhost"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN_DIR/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
	mv "$KUBE_BIN_DIR/agnhost.tmp" "$KUBE_BIN_DIR/agnhost"
fi
# The Conntrack test's boom-server (test/images/regression-issue-74839), a static binary.
if [ ! -x "$KUBE_BIN_DIR/regression-issue-74839" ]; then
	say "  go build regression-issue-74839"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN_DIR/regression-issue-74839.tmp" k8s.io/kubernetes/test/images/regression-issue-74839
	mv "$KUBE_BIN_DIR/regression-issue-74839.tmp" "$KUBE_BIN_DIR/regression-issue-74839"
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
say "kubernetes e2e $KUBE_VERSION: $(($(stat -c %s "$KUBE_BIN_DIR/e2e.test") / 1048576)) MiB e2e.test, agnhost, regression-issue-74839, ginkgo in $KUBE_BIN_DIR"
