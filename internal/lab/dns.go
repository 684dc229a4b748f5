package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/clusterdns"
	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// CoreDNSBin is where scripts/build-e2e.sh (make setup) installs CoreDNS.
func CoreDNSBin() string {
	return filepath.Join(cni.ToolCache(), "coredns", clusterdns.Version, "bin", "coredns")
}

// InstallDNS runs cluster DNS in the running lab (`myelin lab dns`): CoreDNS as the
// kube-dns Service at the kubelets' clusterDNS address. On --runtime containerd it
// imports the image myelin/coredns into every node first; on the lab runtime the pods
// run the host's CoreDNS with a Corefile in the lab directory. With wait it returns once
// a replica is ready (on --cni none that needs a CNI installed first).
func InstallDNS(ctx context.Context, paths labplan.Paths, wait bool, out io.Writer) error {
	plan, err := LoadPlan(paths)
	if err != nil {
		return err
	}
	o := clusterdns.Options{ServiceIP: plan.Addressing.DNSServiceIP(), Domain: "cluster.local", Replicas: 1}
	if plan.Options.Runtime == labplan.RuntimeContainerd {
		archive := images.E2EArchive(cni.ToolCache(), images.CoreDNSImage)
		if !exists(archive) {
			return fmt.Errorf("image %s: archive %s not found; build it with: make setup images (myelin images build --e2e)", images.CoreDNSImage, archive)
		}
		if err := ImportArchives(ctx, paths, plan, archive); err != nil {
			return err
		}
		o.Image = images.CoreDNSImage
	} else {
		if !exists(CoreDNSBin()) {
			return fmt.Errorf("coredns %s not found at %s; build it with: make setup (scripts/build-e2e.sh)", clusterdns.Version, CoreDNSBin())
		}
		o.HostBinary, o.Kubeconfig = CoreDNSBin(), paths.Kubeconfig()
		o.HostCorefile = filepath.Join(paths.Dir, "coredns", "Corefile")
		if err := os.MkdirAll(filepath.Dir(o.HostCorefile), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(o.HostCorefile, []byte(o.Corefile()), 0o644); err != nil {
			return err
		}
	}
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	if err := clusterdns.Apply(ctx, cs, o); err != nil {
		return err
	}
	fmt.Fprintf(out, "cluster DNS: CoreDNS %s as %s/%s at %s (domain %s)\n", clusterdns.Version, clusterdns.Namespace, clusterdns.ServiceName, o.ServiceIP, o.Domain)
	if !wait {
		return nil
	}
	return clusterdns.Wait(ctx, cs, 3*time.Minute)
}

// ImportArchives imports image archives into every node's containerd (--runtime
// containerd), e.g. the e2e suite's images (`myelin lab import`).
func ImportArchives(ctx context.Context, paths labplan.Paths, plan labplan.Plan, archives ...string) error {
	if plan.Options.Runtime != labplan.RuntimeContainerd {
		return fmt.Errorf("the lab runs --runtime %s, which has no images; bring it up with --runtime containerd", plan.Options.Runtime)
	}
	for _, a := range archives {
		if !exists(a) {
			return fmt.Errorf("image archive %s not found; build the e2e images with: make setup images (myelin images build --e2e)", a)
		}
		for _, n := range plan.Nodes {
			if err := importArchive(ctx, paths.ContainerdSocket(n.Name), a); err != nil {
				return err
			}
		}
	}
	return nil
}
