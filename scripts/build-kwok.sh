#!/usr/bin/env bash
# build-kwok.sh builds the pinned kwok (Kubernetes WithOut Kubelet: it simulates nodes and
# their pods against a real apiserver, the scale simulation of `myelin scale` and its
# e2e test) with `go install sigs.k8s.io/kwok/cmd/kwok@<version>`
# from the Go module proxy into "$MYELIN_CACHE/kwok/<version>/bin". The version must be
# internal/kwok.Version's (a test checks they agree). A binary already built is reused;
# safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=pinned-build.sh
. "$here/pinned-build.sh"

KWOK_VERSION=v0.7.0

pinned_build kwok "$KWOK_VERSION" "$MYELIN_CACHE/kwok/$KWOK_VERSION/bin" "a few minutes" \
	env CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
