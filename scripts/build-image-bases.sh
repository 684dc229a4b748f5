#!/usr/bin/env bash
# build-image-bases.sh builds the Debian root filesystem of the agent image (the tools
# myelin-agent execs: iptables, iptables-restore/-save, nft, ip) with mmdebstrap, as a
# tarball in "$MYELIN_CACHE/images/base/". `myelin images build` (make images) layers the
# repo's binaries on top of it. Reproducible: SOURCE_DATE_EPOCH fixes every timestamp,
# and the same package versions give the same bytes. Reused when already built for this
# package list.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

base_dir="$MYELIN_CACHE/images/base"
out="$base_dir/$AGENT_BASE_NAME.tar"
if [ -s "$out" ]; then
	say "agent image base: cached in $out"
	exit 0
fi
mkdir -p "$base_dir"
say "building the agent image's Debian base ($AGENT_BASE_PACKAGES) with mmdebstrap into $out"
SOURCE_DATE_EPOCH=$IMAGE_EPOCH mmdebstrap --quiet --variant=essential \
	--include="$AGENT_BASE_PACKAGES" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	bookworm "$base_dir/tmp-$AGENT_BASE_NAME.tar" http://deb.debian.org/debian </dev/null
mv "$base_dir/tmp-$AGENT_BASE_NAME.tar" "$out" # mmdebstrap picks its output format by the .tar suffix
say "agent image base: $(($(stat -c %s "$out") / 1048576)) MiB"
