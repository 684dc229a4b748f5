set -e
cd /work/main
K=$(ls -d ~/.cache/myelin/kubernetes/*/bin | head -1)/kubectl
bin/myelin lab up --nodes 1 --profile native > /tmp/prof-up.log 2>&1
export KUBECONFIG=$(bin/myelin lab status 2>/dev/null | echo /run/myelin-lab/kubeconfig)
echo KUBECONFIG=$KUBECONFIG
for p in p1 p2; do cat <<Y | $K apply -f - 
apiVersion: v1
kind: Pod
metadata: {name: $p, namespace: default}
spec:
  nodeName: myelin-node-1
  containers: [{name: c, image: lab, command: ["sleep", "infinity"]}]
Y
done
$K wait --for=condition=Ready pod/p1 pod/p2 --timeout=60s
$K get pods -o wide
