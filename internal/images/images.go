package images

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Names of the images, in build order.
const (
	Agent = "agent"
	Pause = "pause"
	Test  = "test"
)

// Names lists every image the lab imports into its nodes.
var Names = []string{Agent, Pause, Test}

// Epoch is every timestamp in the images (scripts/versions.sh IMAGE_EPOCH).
var Epoch = time.Unix(1767225600, 0).UTC()

// AgentBaseName is the Debian root filesystem scripts/build-image-bases.sh builds
// (scripts/versions.sh AGENT_BASE_NAME), under <cache>/images/base/.
const AgentBaseName = "debian-bookworm-iptables-nftables-iproute2"

// Ref is an image's reference: myelin/<name>:<version>, with no registry host.
func Ref(image, version string) string { return "myelin/" + image + ":" + version }

// Dir is where the archives of one version live: <cache>/images/<version>.
func Dir(cache, version string) string { return filepath.Join(cache, "images", version) }

// Archive is the archive of one image: <cache>/images/<version>/<name>.tar.
func Archive(cache, version, image string) string {
	return filepath.Join(Dir(cache, version), image+".tar")
}

// AgentBase is the agent image's Debian base tarball.
func AgentBase(cache string) string {
	return filepath.Join(cache, "images", "base", AgentBaseName+".tar")
}

// CNIPluginsVersion is the containernetworking/plugins release whose portmap plugin the
// agent image carries as /usr/bin/myelin-portmap (scripts/build-cni-plugins.sh).
const CNIPluginsVersion = "v1.9.1"

// PortmapBinary is where scripts/build-cni-plugins.sh builds the portmap plugin.
func PortmapBinary(cache string) string {
	return filepath.Join(cache, "cni-plugins", CNIPluginsVersion, "bin", "portmap")
}

// Options are the inputs of Build.
type Options struct {
	Cache   string // the tool cache (cni.ToolCache())
	Version string // the tag (internal/version.Version)
	BinDir  string // where myelin, myelin-agent, myelin-cni and myelin-pause are
	Busybox string // Debian's busybox-static binary ("" = /bin/busybox)
	Force   bool   // rebuild archives that exist
}

// Build writes every image's archive that does not exist yet (all of them with Force).
func Build(o Options, out io.Writer) error {
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	for _, image := range Names {
		path := Archive(o.Cache, o.Version, image)
		if _, err := os.Stat(path); err == nil && !o.Force {
			fmt.Fprintf(out, "image %s: %s exists\n", Ref(image, o.Version), path)
			continue
		}
		spec, err := specOf(image, o)
		if err != nil {
			return fmt.Errorf("build image %s: %w", Ref(image, o.Version), err)
		}
		if err := write(spec, Ref(image, o.Version), path); err != nil {
			return fmt.Errorf("build image %s: %w", Ref(image, o.Version), err)
		}
		fmt.Fprintf(out, "image %s: wrote %s\n", Ref(image, o.Version), path)
	}
	return Prune(o.Cache, o.Version, out)
}

// spec is what one image holds: an optional base tarball, then one layer of files.
type spec struct {
	base       string
	files      []file
	entrypoint []string
	cmd        []string
}

// write assembles the image of s and writes it as an archive tagged ref, atomically.
func write(s spec, ref, path string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var layers []v1.Layer
	if s.base != "" {
		base, err := tarball.LayerFromFile(s.base)
		if err != nil {
			return fmt.Errorf("read base %s: %w", s.base, err)
		}
		layers = append(layers, base)
	}
	top, cleanup, err := filesLayer(filepath.Dir(path), s.files)
	if err != nil {
		return err
	}
	defer cleanup()
	img, err := mutate.AppendLayers(empty.Image, append(layers, top)...)
	if err != nil {
		return err
	}
	if img, err = configure(img, s); err != nil {
		return err
	}
	if err := tarball.WriteToFile(path+".tmp", tag, img); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// configure sets the image's platform, command and fixed timestamps.
func configure(img v1.Image, s spec) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint, cf.Config.Cmd = s.entrypoint, s.cmd
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: Epoch})
}

// onlyArchives says whether dir holds nothing but Build's archives (agent.tar,
// pause.tar, test.tar, and their .tmp while written): what Prune may remove. A
// directory of anything else under the cache is not a version of ours.
func onlyArchives(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".tmp")
		if !e.Type().IsRegular() || (name != Agent+".tar" && name != Pause+".tar" && name != Test+".tar") {
			return false
		}
	}
	return true
}

// KeepVersions is how many versions' archives Prune keeps besides the one just built.
const KeepVersions = 3

// Prune removes the archives of older versions from <cache>/images, keeping the
// current one and the KeepVersions most recently built or used others; the agent base and the
// e2e images are not versions and stay. Each version's agent archive is ~120 MB, and
// every commit is a version (git describe), so without this the cache only grows.
func Prune(cache, current string, out io.Writer) error {
	root := filepath.Join(cache, "images")
	now := time.Now()
	if err := os.Chtimes(Dir(cache, current), now, now); err != nil { // built or used now
		return fmt.Errorf("prune old images: %w", err)
	}
	dirs, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("prune old images: %w", err)
	}
	type version struct {
		name string
		mod  time.Time
	}
	var old []version
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == current || d.Name() == "base" || d.Name() == "e2e" {
			continue
		}
		if !onlyArchives(filepath.Join(root, d.Name())) {
			fmt.Fprintf(out, "images: left %s: it holds more than myelin's image archives (a --cache of your own?)\n", filepath.Join(root, d.Name()))
			continue
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("prune old images: %w", err)
		}
		old = append(old, version{d.Name(), info.ModTime()})
	}
	sort.Slice(old, func(i, j int) bool { return old[i].mod.After(old[j].mod) })
	for i := KeepVersions; i < len(old); i++ {
		if err := os.RemoveAll(filepath.Join(root, old[i].name)); err != nil {
			return fmt.Errorf("prune old images: %w", err)
		}
		fmt.Fprintf(out, "images: removed the archives of version %s (%s)\n", old[i].name, filepath.Join(root, old[i].name))
	}
	return nil
}
