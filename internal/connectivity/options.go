package connectivity

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Executor runs a command inside a pod's first container (its network namespace is
// what matters) and returns its combined output.
type Executor interface {
	Exec(ctx context.Context, namespace, pod string, argv []string) (string, error)
}

// Options configure one `myelin connectivity test` run.
type Options struct {
	Client kubernetes.Interface
	// REST is the client configuration the API executor uses (pods/exec).
	REST *rest.Config
	// Exec runs probes in pods; nil means pods/exec through the apiserver.
	Exec Executor
	// Image is the pods' image; Myelin is the myelin binary's path inside it (on the
	// lab runtime, the host's binary: pods run host programs).
	Image, Myelin string
	// External is an HOST:PORT outside the cluster that answers HTTP GET /.
	External string
	// ClusterDomain is the cluster's DNS domain (DNS scenario).
	ClusterDomain string
	// Namespace is the test namespace; "" picks myelin-connectivity-<random>.
	Namespace string
	// Keep leaves the namespace in place for inspection.
	Keep bool
	// Timeout bounds the wait for the pods to run and Services to have endpoints.
	Timeout time.Duration
	// CheckMyelin fails when the cluster runs no myelin agents (nil: look for the
	// chart's DaemonSet, kube-system/myelin, with a ready agent).
	CheckMyelin func(ctx context.Context) error
	// Only, if not empty, runs only scenarios whose name contains one of these.
	Only []string
	// Skip leaves out scenarios whose name contains one of these (reported as skipped).
	Skip []string
}

// DefaultExternal is the lab's external host (myelin-lab-ext, `lab serve` on :80).
const DefaultExternal = "203.0.113.10:80"

func (o *Options) validate() error {
	if o.External != "" {
		host, port, err := net.SplitHostPort(o.External)
		if err != nil || net.ParseIP(host) == nil {
			return fmt.Errorf("--external %q: want IP:PORT of an HTTP server outside the cluster, e.g. %s", o.External, DefaultExternal)
		}
		if _, err := strconv.Atoi(port); err != nil {
			return fmt.Errorf("--external %q: port %q is not a number", o.External, port)
		}
	}
	if o.Image == "" || o.Myelin == "" {
		return fmt.Errorf("no pod image or myelin path inside it: set --image and --myelin-path")
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	return nil
}
