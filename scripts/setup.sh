#!/usr/bin/env bash
# setup.sh installs everything myelin needs on a fresh Debian bookworm machine (as root):
# the apt packages of the datapath, the lab and the benchmarks, and the pinned Kubernetes
# and Flannel binaries built from the Go module proxy into a cache outside the repository.
# Safe to run twice: each step checks first and does nothing when already done.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

say() { printf 'setup: %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
	say "must run as root (it installs apt packages and the lab needs network namespaces); run: sudo make setup"
	exit 1
fi

apt_packages=(
	clang llvm libbpf-dev bpftool clang-format  # BPF toolchain
	iproute2 iptables nftables ethtool    # node networking
	util-linux procps psmisc hostname     # nsenter, unshare, ps, fuser, hostname
	iputils-ping curl                     # real clients
	iperf3 netperf sockperf qperf wrk     # load generators for tests and benchmarks
	etcd-client                           # etcdctl: writes flannel's config (lab --cni flannel)
	containernetworking-plugins           # reference bridge, host-local, portmap, loopback (lab --cni bridge|flannel; containerd)
	containerd runc                       # the real container runtime (lab --runtime containerd)
	mmdebstrap busybox-static             # rootfs of the locally built images (scripts/build-image-bases.sh, make images)
	gcc libc6-dev                         # cgo, which flannel's build needs
	openssl ca-certificates
	chromium                              # the headless browser of the service map's tests (internal/ui, e2e)
)

# netperf lives in Debian's non-free component; enable that component for apt.
enable_non_free() {
	local src=/etc/apt/sources.list.d/myelin-non-free.sources
	if [ -f "$src" ]; then return 1; fi
	# The source names bookworm's suites: on another release it would mix releases (or,
	# on Ubuntu, break apt update for the machine). Leave netperf to the owner there.
	local codename
	codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	if [ "$codename" != bookworm ]; then
		say "not Debian bookworm (VERSION_CODENAME=${codename:-unknown} in /etc/os-release): not adding bookworm's non-free source; install netperf yourself if apt cannot"
		return 1
	fi
	say "enabling Debian's non-free component for netperf ($src)"
	cat >"$src" <<'SRC'
# Added by myelin's scripts/setup.sh: netperf is in Debian's non-free component.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	return 0
}

missing_packages() {
	local p
	for p in "${apt_packages[@]}"; do
		case "$p" in
		# Docker's containerd.io provides both binaries and conflicts with Debian's
		# packages: installing them would remove it (and docker-ce with it).
		containerd | runc) command -v "$p" >/dev/null && continue ;;
		esac
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
	done
}

install_packages() {
	local updated=0
	if enable_non_free; then apt-get update -qq; updated=1; fi
	mapfile -t missing < <(missing_packages)
	if [ "${#missing[@]}" -eq 0 ]; then
		say "apt packages: all present"
		return
	fi
	say "installing apt packages: ${missing[*]}"
	[ "$updated" -eq 1 ] || apt-get update -qq
	# --no-remove: setup installs, it never removes a package of the machine's to make room.
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --no-remove "${missing[@]}" >/dev/null; then
		say "apt-get install ${missing[*]} failed (above); if apt wanted to remove packages to install them, setup refused: install those packages yourself, resolving the conflict, and run again"
		exit 1
	fi
	# containerd's package starts a system containerd; each lab node runs its own. Only
	# the one this run just installed is stopped: a containerd that was there before
	# (Docker's, k3s's) is the machine owner's and stays as it is.
	if [[ " ${missing[*]} " == *" containerd "* ]] && systemctl is-active --quiet containerd 2>/dev/null; then
		systemctl disable --now containerd >/dev/null 2>&1 || true
	fi
}

check_go() {
	if ! command -v go >/dev/null; then
		say "go is not installed; install Go ${GO_MIN} or newer (https://go.dev/doc/install) and run again"
		exit 1
	fi
}

install_packages
check_go
"$here/build-k8s.sh"
"$here/build-etcd.sh"
"$here/build-flannel.sh"
"$here/build-helm.sh"
"$here/build-hubble.sh"
"$here/build-promtool.sh"
"$here/build-kwok.sh"
"$here/build-image-bases.sh"
"$here/build-e2e.sh"
"$here/build-cni-plugins.sh"
say "done"
