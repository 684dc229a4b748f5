#!/usr/bin/env bash
# build-image-bases.sh builds the Debian root filesystems the locally built images start
# from, with mmdebstrap, as tarballs in "$MYELIN_CACHE/images/base/":
#   - the agent image's (the tools myelin-agent execs: iptables, iptables-restore/-save,
#     nft, ip);
#   - the e2e suite's agnhost image's (a shell and the network clients its tests exec);
#   - the suite's nginx image's (imageutils.Nginx, which the EndpointSlice tests run:
#     Debian's nginx-light serving port 80; internal/images.NginxBaseName).
# `myelin images build` (make images) layers binaries on top. Reproducible:
# SOURCE_DATE_EPOCH fixes every timestamp, and the same package versions give the same
# bytes. Each is reused when already built for its package list.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

# build_base WHAT NAME PACKAGES builds WHAT image's base with PACKAGES into NAME.tar.
build_base() {
	local what=$1 name=$2 packages=$3
	local dir="$MYELIN_CACHE/images/base" out="$MYELIN_CACHE/images/base/$name.tar"
	if [ -s "$out" ]; then
		say "$what image base: cached in $out"
		return
	fi
	mkdir -p "$dir"
	say "building the $what image's Debian base ($packages) with mmdebstrap into $out"
	SOURCE_DATE_EPOCH=$IMAGE_EPOCH mmdebstrap --quiet --variant=essential \
		--include="$packages" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		bookworm "$dir/tmp-$name.tar" http://deb.debian.org/debian </dev/null
	mv "$dir/tmp-$name.tar" "$out" # mmdebstrap picks its output format by the .tar suffix
	say "$what image base: $(($(stat -c %s "$out") / 1048576)) MiB"
}

build_base agent "$AGENT_BASE_NAME" "$AGENT_BASE_PACKAGES"
build_base agnhost "$AGNHOST_BASE_NAME" "$AGNHOST_BASE_PACKAGES"
build_base nginx "$NGINX_BASE_NAME" "$NGINX_BASE_PACKAGES"
