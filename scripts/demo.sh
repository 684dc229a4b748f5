#!/usr/bin/env bash
# demo.sh brings up a lab (or reuses the running one) and shows it working: nodes,
# a Deployment of HTTP servers spread over the nodes behind a Service, and a client
# reaching each of them and the Service.
# Usage: scripts/demo.sh MYELIN_BINARY [lab up flags...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
myelin=$1
shift

export KUBECONFIG=/run/myelin-lab/kubeconfig
export PATH="$KUBE_BIN_DIR:$PATH"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "myelin lab up $*"
"$myelin" lab up "$@"

step "kubectl get nodes -o wide"
kubectl get nodes -o wide

step "a Deployment of 2 HTTP servers spread over the nodes, a Service, and a client pod"
sed "s#@MYELIN@#$myelin#g" "$here/../test/e2e/testdata/demo.yaml" | kubectl apply -f -
kubectl rollout status deployment/web --timeout=120s
kubectl wait --for=condition=Ready pod/client --timeout=120s
kubectl get pods -o wide

step "the client reaches each server (same node and across nodes)"
client_node=$(kubectl get pod client -o jsonpath='{.spec.nodeName}')
kubectl get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP} {.spec.nodeName}{"\n"}{end}' |
	while read -r name ip node; do
		where="across nodes"
		[ "$node" = "$client_node" ] && where="same node"
		printf '%-28s %-12s (%s): ' "$name" "$ip" "$where"
		"$myelin" lab exec client -- curl -sS -m 5 "http://$ip:8080/"
	done

step "the client reaches the Service web by its cluster IP (each request picks a backend)"
cluster_ip=$(kubectl get service web -o jsonpath='{.spec.clusterIP}')
for _ in 1 2 3 4; do
	"$myelin" lab exec client -- curl -sS -m 5 "http://$cluster_ip/"
done

if [ -S "/run/myelin/myelin-node-1/agent.sock" ]; then
	step "myelin services --node $client_node"
	"$myelin" services --node "$client_node"

	step "myelin status --node $client_node"
	"$myelin" status --node "$client_node"
fi

step "the lab is still running"
cat <<EOT
  export KUBECONFIG=$KUBECONFIG PATH=$KUBE_BIN_DIR:\$PATH
  kubectl get pods -o wide
  $myelin lab exec client -- ping -c 3 <pod IP>
  $myelin lab status
  make lab-down        # removes everything the lab made
EOT
