package images

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// E2ERegistry is the registry part of the names the upstream e2e suite (e2e.test) asks for,
// set through its image-repo override (KUBE_TEST_REPO_LIST, see E2ERepoList). It is not a
// real registry host (.invalid never resolves): the images exist only in the nodes'
// containerd, imported from the archives Build writes, and are never pulled.
const E2ERegistry = "myelin.invalid/e2e"

// The e2e images, by the name and tag e2e.test v1.34.4 expects (test/utils/image of
// k8s.io/kubernetes at the lab's version; a new Kubernetes version may change the tags).
const (
	E2EAgnhost = "agnhost:2.56"
	E2EBusybox = "busybox:1.37.0-1"
	E2EPause   = "pause:3.10.1"
	// E2EJessieDnsutils is the DNS tests' second querier (dig, getent, sh): our agnhost
	// Debian base under the suite's name.
	E2EJessieDnsutils = "jessie-dnsutils:1.7"
	// E2ENginx is Debian's nginx-light serving port 80 (the EndpointSlice tests' pods).
	E2ENginx = "nginx:1.14-4"
	// E2ERegression74839 is the Conntrack test's boom-server, the module's
	// test/images/regression-issue-74839 alone (a static binary, as upstream's image).
	E2ERegression74839 = "regression-issue-74839:1.2"
)

// E2ENames are the e2e images Build writes, in import order.
var E2ENames = []string{E2EAgnhost, E2EBusybox, E2EPause, E2EJessieDnsutils, E2ENginx, E2ERegression74839}

// CoreDNSImage is the cluster DNS image the lab runs on --runtime containerd
// (internal/clusterdns), built from the CoreDNS binary of make setup.
const CoreDNSImage = "myelin/coredns:v1.12.4"

// AgnhostBaseName is the agnhost image's Debian base (scripts/build-image-bases.sh,
// AGNHOST_BASE_NAME): the tools e2e tests run inside agnhost pods (sh, dig, curl, wget,
// nc, ip; the Services tests fetch with wget).
const AgnhostBaseName = "debian-bookworm-agnhost-wget"

// NginxBaseName is the nginx image's Debian base (scripts/versions.sh, NGINX_BASE_NAME; built by scripts/build-image-bases.sh).
const NginxBaseName = "debian-bookworm-nginx-light"

// E2ERef is the full name of an e2e image (one of E2ENames) as the suite asks for it.
func E2ERef(image string) string { return E2ERegistry + "/" + image }

// E2EArchive is where Build writes an e2e image (one of E2ENames, or CoreDNSImage).
func E2EArchive(cache, image string) string {
	return filepath.Join(cache, "images", "e2e", filepath.Base(sanitize(image))+".tar")
}

// E2ERepoList is the suite's KUBE_TEST_REPO_LIST file: every registry it draws the network
// tests' images from becomes E2ERegistry.
func E2ERepoList() string {
	return fmt.Sprintf("promoterE2eRegistry: %[1]s\ngcRegistry: %[1]s\ndockerLibraryRegistry: %[1]s\nbuildImageRegistry: %[1]s\n", E2ERegistry)
}

// E2EOptions are the inputs of the e2e images: binaries make setup builds
// (scripts/build-e2e.sh) and the repository's myelin-pause.
type E2EOptions struct {
	Cache   string // the tool cache (cni.ToolCache())
	KubeBin string // e2e.test's directory, with agnhost and agnhost-files/ (lab.KubeBinDir())
	CoreDNS string // the coredns binary
	BinDir  string // where myelin-pause is
	Busybox string // Debian's busybox-static binary ("" = /bin/busybox)
	Force   bool   // rebuild archives that exist
}

// BuildE2E writes the e2e images and the CoreDNS image as archives (E2EArchive), each
// named as the suite or the lab asks for it. A missing input is an error naming it and
// the command that builds it.
func BuildE2E(o E2EOptions, out io.Writer) error {
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	refs := map[string]string{CoreDNSImage: CoreDNSImage}
	for _, image := range E2ENames {
		refs[image] = E2ERef(image)
	}
	for _, image := range append(append([]string{}, E2ENames...), CoreDNSImage) {
		path := E2EArchive(o.Cache, image)
		if fi, err := os.Stat(path); err == nil && !o.Force && !baseNewer(e2eBase(o.Cache, image), fi) {
			fmt.Fprintf(out, "image %s: %s exists\n", refs[image], path)
			continue
		}
		spec, err := e2eSpec(image, o)
		if err == nil {
			err = write(spec, refs[image], path)
		}
		if err != nil {
			return fmt.Errorf("build image %s: %w", refs[image], err)
		}
		fmt.Fprintf(out, "image %s: wrote %s\n", refs[image], path)
	}
	return nil
}

// e2eBase is the Debian base archive that image is built on ("" for none).
func e2eBase(cache, image string) string {
	switch image {
	case E2EAgnhost, E2EJessieDnsutils:
		return filepath.Join(cache, "images", "base", AgnhostBaseName+".tar")
	case E2ENginx:
		return filepath.Join(cache, "images", "base", NginxBaseName+".tar")
	}
	return ""
}

// baseNewer says whether base was built after the archive fi: a base whose packages
// changed has a new name, and the images built on the old one are rebuilt.
func baseNewer(base string, archive os.FileInfo) bool {
	if base == "" {
		return false
	}
	fi, err := os.Stat(base)
	return err == nil && fi.ModTime().After(archive.ModTime())
}

func e2eSpec(image string, o E2EOptions) (spec, error) {
	setup := func(path string) error {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s is missing; build it with: make setup (scripts/build-e2e.sh, scripts/build-image-bases.sh)", path)
		}
		return nil
	}
	switch image {
	case E2EAgnhost:
		base := e2eBase(o.Cache, image)
		agnhost, certs := filepath.Join(o.KubeBin, "agnhost"), filepath.Join(o.KubeBin, "agnhost-files")
		for _, p := range []string{base, agnhost, o.CoreDNS, certs} {
			if err := setup(p); err != nil {
				return spec{}, err
			}
		}
		files, err := binaries(map[string]string{"agnhost": agnhost, "coredns": o.CoreDNS})
		files = append(files, file{path: "agnhost-2", link: "agnhost"}, file{path: "uploads", dir: true, mode: 0o777},
			file{path: "localhost.crt", src: filepath.Join(certs, "localhost.crt"), mode: 0o644},
			file{path: "localhost.key", src: filepath.Join(certs, "localhost.key"), mode: 0o644})
		return spec{base: base, files: files, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}}, err
	case E2EJessieDnsutils:
		base := e2eBase(o.Cache, image)
		if err := setup(base); err != nil {
			return spec{}, err
		}
		return spec{base: base, files: []file{{path: "results", dir: true, mode: 0o777}}, cmd: []string{"/bin/bash"}}, nil
	case E2ENginx:
		base := e2eBase(o.Cache, image)
		if err := setup(base); err != nil {
			return spec{}, err
		}
		return spec{base: base, cmd: []string{"/usr/sbin/nginx", "-g", "daemon off;"}}, nil
	case E2EBusybox:
		s, err := busyboxSpec(o.Busybox)
		s.cmd = []string{"sh"}
		return s, err
	case E2EPause:
		files, err := binaries(map[string]string{"pause": filepath.Join(o.BinDir, "myelin-pause")})
		return spec{files: files, entrypoint: []string{"/pause"}}, err
	case E2ERegression74839:
		bin := filepath.Join(o.KubeBin, "regression-issue-74839")
		if err := setup(bin); err != nil {
			return spec{}, err
		}
		files, err := binaries(map[string]string{"regression-issue-74839": bin})
		return spec{files: files, entrypoint: []string{"/regression-issue-74839"}}, err
	case CoreDNSImage:
		if err := setup(o.CoreDNS); err != nil {
			return spec{}, err
		}
		files, err := binaries(map[string]string{"coredns": o.CoreDNS})
		return spec{files: files, entrypoint: []string{"/coredns"}}, err
	}
	return spec{}, fmt.Errorf("unknown e2e image %q", image)
}

func sanitize(image string) string {
	b := []byte(image)
	for i, c := range b {
		if c == ':' || c == '/' {
			b[i] = '_'
		}
	}
	return string(b)
}
