# versions.sh pins the versions setup installs; sourced by the other scripts.
KUBE_VERSION=v1.34.4
GO_MIN=1.24
# The cache lives outside the repository so a fresh clone reuses it.
MYELIN_CACHE=${MYELIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache}/myelin}
KUBE_BIN_DIR="$MYELIN_CACHE/kubernetes/$KUBE_VERSION/bin"
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubelet)
# The lab's etcd (scripts/build-etcd.sh; internal/lab.EtcdVersion), from its Go module.
ETCD_VERSION=v3.6.16
ETCD_BIN_DIR="$MYELIN_CACHE/etcd/$ETCD_VERSION/bin"
FLANNEL_VERSION=v0.26.7
HELM_VERSION=v3.19.0
HELM_BIN_DIR="$MYELIN_CACHE/helm/$HELM_VERSION/bin"
# The agent image's Debian base (scripts/build-image-bases.sh); the name changes with the
# package list so a changed list builds a new base. `myelin images build` reads the file
# by this name (internal/images.AgentBaseName).
AGENT_BASE_PACKAGES=iptables,nftables,iproute2
AGENT_BASE_NAME=debian-bookworm-iptables-nftables-iproute2
# Every timestamp in the images (SOURCE_DATE_EPOCH): 2026-01-01T00:00:00Z.
IMAGE_EPOCH=1767225600
# The hubble CLI (scripts/build-hubble.sh), from the cilium module's hubble package.
HUBBLE_VERSION=v1.18.4
HUBBLE_BIN_DIR="$MYELIN_CACHE/hubble/$HUBBLE_VERSION/bin"
# Cluster DNS (scripts/build-e2e.sh; internal/clusterdns): CoreDNS from its Go module.
COREDNS_VERSION=v1.12.4
COREDNS_BIN_DIR="$MYELIN_CACHE/coredns/$COREDNS_VERSION/bin"
# The Debian base of the e2e suite's agnhost image (scripts/build-image-bases.sh): the tools its
# tests run inside agnhost pods (sh, dig, curl, wget, nc, ip). internal/images.AgnhostBaseName.
AGNHOST_BASE_PACKAGES=bash,bind9-dnsutils,curl,wget,netcat-openbsd,iproute2,iputils-ping
AGNHOST_BASE_NAME=debian-bookworm-agnhost-wget
# The e2e suite's nginx image's base (imageutils.Nginx): internal/images.NginxBaseName.
NGINX_BASE_PACKAGES=nginx-light
NGINX_BASE_NAME=debian-bookworm-nginx-light
