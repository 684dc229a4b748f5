#!/usr/bin/env bash
# build-cni-plugins.sh builds the upstream CNI plugins myelin chains after its own plugin,
# from the containernetworking/plugins Go module at a pinned version, into
# "$MYELIN_CACHE/cni-plugins/<version>/bin":
#   - portmap: hostPort (a pod's ports.hostPort) as DNAT rules in the node's netns.
# `myelin images build` puts it in the agent image as /usr/bin/myelin-portmap, which the
# chart installs next to myelin-cni (internal/images.PortmapBinary). A binary already
# built is reused; safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

# Keep in step with internal/images.CNIPluginsVersion.
CNI_PLUGINS_VERSION=v1.9.1
bindir="$MYELIN_CACHE/cni-plugins/$CNI_PLUGINS_VERSION/bin"

say() { printf 'setup: %s\n' "$*"; }

if [ -x "$bindir/portmap" ]; then
	say "cni plugins $CNI_PLUGINS_VERSION: cached in $bindir (portmap)"
	exit 0
fi
mkdir -p "$bindir"
say "building the portmap CNI plugin $CNI_PLUGINS_VERSION from the Go module proxy into $bindir"
# go install writes the binary whole (a temporary file renamed into place).
CGO_ENABLED=0 GOBIN="$bindir" go install -trimpath \
	-ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
	"github.com/containernetworking/plugins/plugins/meta/portmap@$CNI_PLUGINS_VERSION"
say "cni plugins $CNI_PLUGINS_VERSION: built $bindir/portmap"
