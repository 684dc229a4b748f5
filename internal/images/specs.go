package images

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// specOf returns what image holds, checking its inputs first.
func specOf(image string, o Options) (spec, error) {
	bin := func(b string) string { return filepath.Join(o.BinDir, b) }
	switch image {
	case Agent:
		base := AgentBase(o.Cache)
		if _, err := os.Stat(base); err != nil {
			return spec{}, fmt.Errorf("the agent's Debian base %s is missing; build it with: make setup (scripts/build-image-bases.sh)", base)
		}
		portmap := PortmapBinary(o.Cache)
		if _, err := os.Stat(portmap); err != nil {
			return spec{}, fmt.Errorf("the portmap CNI plugin %s is missing; build it with: make setup (scripts/build-cni-plugins.sh)", portmap)
		}
		files, err := binaries(map[string]string{
			"usr/bin/myelin": bin("myelin"), "usr/bin/myelin-agent": bin("myelin-agent"), "usr/bin/myelin-cni": bin("myelin-cni"),
			"usr/bin/myelin-portmap": portmap,
		})
		return spec{base: base, files: files, entrypoint: []string{"/usr/bin/myelin-agent"}}, err
	case Pause:
		files, err := binaries(map[string]string{"pause": bin("myelin-pause")})
		return spec{files: files, entrypoint: []string{"/pause"}}, err
	case Test:
		return testSpec(o.Busybox, bin("myelin"))
	}
	return spec{}, fmt.Errorf("unknown image %q; the images are %s", image, strings.Join(Names, ", "))
}

// testSpec is busybox with a link per applet, and myelin for the lab's probes.
func testSpec(busybox, myelin string) (spec, error) {
	s, err := busyboxSpec(busybox)
	if err != nil {
		return spec{}, err
	}
	files, err := binaries(map[string]string{"usr/bin/myelin": myelin})
	s.files = append(s.files, files...)
	s.cmd = []string{"/bin/sh"}
	return s, err
}

// busyboxSpec is an image of Debian's busybox-static with every applet in /bin and /tmp.
func busyboxSpec(busybox string) (spec, error) {
	files, err := binaries(map[string]string{"bin/busybox": busybox})
	if err != nil {
		return spec{}, err
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return spec{}, fmt.Errorf("list busybox applets (%s --list): %w; install busybox-static (make setup)", busybox, err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			files = append(files, file{path: "bin/" + applet, link: "busybox"})
		}
	}
	files = append(files, file{path: "tmp", dir: true, mode: 0o1777})
	return spec{files: files}, nil
}

func binaries(paths map[string]string) ([]file, error) {
	var files []file
	for dst, src := range paths {
		if err := checkStatic(src); err != nil {
			return nil, err
		}
		files = append(files, file{path: dst, src: src, mode: 0o755})
	}
	return files, nil
}

func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w; build it with: make build", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the images need static binaries: build with CGO_ENABLED=0 (make build)", path)
		}
	}
	return nil
}
