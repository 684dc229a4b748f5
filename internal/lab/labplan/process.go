package labplan

// Process is one supervised child of the lab.
type Process struct {
	Name   string   // also the log file's name
	Argv   []string // run as is; processes in a node's netns are wrapped in nsenter
	Health string   // URL that answers 200 once the process is ready ("" = running is enough)
	// HealthTLS, when set, is how the health probe verifies the server and the client
	// certificate it presents (etcd accepts no client without one). When nil the probe
	// presents none and does not verify the lab's serving certificates.
	HealthTLS *TLSClient
	// Cgroup names the node whose cgroup (HostCgroup) the process starts in, "" for the
	// supervisor's: a node's processes and their children (the lab kubelet's pods)
	// share it, and socket-LB attaches to it in the cgroup v2 hierarchy.
	Cgroup string
}

// TLSClient names the PEM files of a TLS client: the CA it verifies the server
// against, and the certificate and key it presents.
type TLSClient struct{ CA, Cert, Key string }
