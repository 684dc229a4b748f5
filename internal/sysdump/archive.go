package sysdump

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// archive writes the dump's files under one top directory of a .tar.gz; every file is
// redacted on the way in. Close adds manifest.json (every file and what failed).
type archive struct {
	top    string
	gz     *gzip.Writer
	tw     *tar.Writer
	now    time.Time
	files  []string
	errors map[string]string
}

func newArchive(w io.Writer, top string, now time.Time) *archive {
	gz := gzip.NewWriter(w)
	return &archive{top: top, gz: gz, tw: tar.NewWriter(gz), now: now, errors: map[string]string{}}
}

// add writes one file (name relative to the top directory), redacted. A name that
// would leave the top directory (parts of names come from agents) is refused: whoever
// unpacks the archive must get nothing outside it.
func (a *archive) add(name string, data []byte) error {
	full := path.Join(a.top, name)
	if !strings.HasPrefix(full, a.top+"/") || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("write %q to the archive: the name leaves the archive's directory", name)
	}
	data = Redact(data)
	hdr := &tar.Header{Name: full, Mode: 0o600, Size: int64(len(data)), ModTime: a.now, Typeflag: tar.TypeReg}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s to the archive: %w", name, err)
	}
	if _, err := a.tw.Write(data); err != nil {
		return fmt.Errorf("write %s to the archive: %w", name, err)
	}
	a.files = append(a.files, name)
	return nil
}

// addJSON writes v as JSON: an agent's answer (json.RawMessage) compacted, never
// re-indented, as indenting JSON nested n levels deep writes about n² bytes (a few KB
// of [[[...]]] from a broken or hostile agent would become MBs); our own values
// indented.
func (a *archive) addJSON(name string, v any) error {
	if raw, ok := v.(json.RawMessage); ok {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return fmt.Errorf("encode %s: the agent's answer is not JSON: %w", name, err)
		}
		return a.add(name, append(b.Bytes(), '\n'))
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return a.add(name, append(b, '\n'))
}

// checkName is nil when name (a node's or a map's, told by an agent) can be one path
// element of an archive entry: not empty, no separator, no "..", no NUL.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\\x00") || strings.Contains(name, "..") {
		return fmt.Errorf("name %q is not a plain file name (empty, or holds /, \\, .. or NUL): left out", name)
	}
	return nil
}

// failed records what could not be collected; it goes into the manifest.
func (a *archive) failed(name string, err error) { a.errors[name] = err.Error() }

// Manifest is the archive's table of contents (manifest.json).
type Manifest struct {
	Created time.Time         `json:"created"`
	Version string            `json:"version"`
	Files   []string          `json:"files"`
	Errors  map[string]string `json:"errors,omitempty"`
}

func (a *archive) close(version string) error {
	files := append([]string(nil), a.files...)
	sort.Strings(files)
	if err := a.addJSON("manifest.json", Manifest{Created: a.now, Version: version, Files: files, Errors: a.errors}); err != nil {
		return err
	}
	if err := a.tw.Close(); err != nil {
		return fmt.Errorf("finish the archive: %w", err)
	}
	return a.gz.Close()
}

// Entry is one file of a dump archive as read back by ReadArchive.
type Entry struct {
	Name string // as stored: <top directory>/<file>
	Mode int64
	Data []byte
}

// ReadArchive reads a dump archive (.tar.gz) back, every entry in archive order.
func ReadArchive(r io.Reader) ([]Entry, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("read the dump archive: %w", err)
	}
	var entries []Entry
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return entries, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the dump archive: %w", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read %s from the dump archive: %w", h.Name, err)
		}
		entries = append(entries, Entry{Name: h.Name, Mode: h.Mode, Data: b})
	}
}
