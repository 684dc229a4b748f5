// Package flannel is the lab's --cni flannel flavour: Flannel run as its users do,
// with etcd as its store. The lab writes the network configuration to the lab's etcd,
// one flanneld per node (in the node's netns) leases a subnet and programs the backend,
// and each lab kubelet installs a conflist for the reference bridge + host-local
// plugins from flanneld's subnet file, as flannel's own CNI plugin would delegate (the
// meta-plugin itself isn't needed).
package flannel
