package images

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// file is one entry of an image's top layer: a copy of src, a symlink, or a directory.
type file struct {
	path string // inside the image, without a leading slash
	src  string // regular file: copied from here
	link string // symlink target
	dir  bool
	mode int64
}

// filesLayer writes files as a layer tarball in tmpDir (sorted, root-owned, every
// timestamp Epoch, so the same files give the same layer) and returns it as a layer
// with a function that removes the tarball once the image is written.
func filesLayer(tmpDir string, files []file) (v1.Layer, func(), error) {
	f, err := os.CreateTemp(tmpDir, "layer-*.tar")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.Remove(f.Name()) }
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	tw := tar.NewWriter(f)
	seen := map[string]bool{}
	for _, e := range files {
		if err := writeParents(tw, e.path, seen); err == nil {
			err = writeEntry(tw, e)
		}
		if err != nil {
			f.Close()
			cleanup()
			return nil, nil, err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		cleanup()
		return nil, nil, err
	}
	if err := f.Close(); err != nil {
		cleanup()
		return nil, nil, err
	}
	layer, err := tarball.LayerFromFile(f.Name())
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return layer, cleanup, nil
}

// writeParents adds the directories above path that no earlier entry added.
func writeParents(tw *tar.Writer, path string, seen map[string]bool) error {
	dir := filepath.Dir(path)
	if dir == "." || seen[dir] {
		return nil
	}
	if err := writeParents(tw, dir, seen); err != nil {
		return err
	}
	seen[dir] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX})
}

func writeEntry(tw *tar.Writer, e file) error {
	h := &tar.Header{Name: e.path, Mode: e.mode, ModTime: Epoch, Format: tar.FormatPAX}
	switch {
	case e.dir:
		h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		return tw.WriteHeader(h)
	case e.link != "":
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		return tw.WriteHeader(h)
	}
	src, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}
