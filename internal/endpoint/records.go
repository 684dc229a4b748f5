package endpoint

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/statefile"
)

// recordPath is the file of containerID's endpoint record in dir: a hash of the id
// (api.RecordFileName), so that an id of any length the CNI spec allows can be
// recorded; the record itself names the container.
func recordPath(dir, containerID string) string {
	return filepath.Join(dir, api.RecordFileName(containerID))
}

// legacyRecordName is the file name under which agents before recordPath kept
// containerID's record: the id itself (which an id over 246 bytes could not be).
// readRecords reads such records; writeRecord and removeRecord remove them, so a
// container never has a record in each format.
func legacyRecordName(containerID string) string { return containerID + ".json" }

func writeRecord(dir string, ep *api.Endpoint) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return err
	}
	if err := statefile.Write(recordPath(dir, ep.ContainerID), b, 0o600); err != nil {
		return fmt.Errorf("write endpoint record: %w", err)
	}
	if err := removeLegacyRecord(dir, ep.ContainerID); err != nil {
		return fmt.Errorf("write endpoint record: replace the record in the former format: %w", err)
	}
	return nil
}

func removeRecord(dir, containerID string) error {
	if err := os.Remove(recordPath(dir, containerID)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return removeLegacyRecord(dir, containerID)
}

// removeLegacyRecord removes containerID's record in the former format
// (legacyRecordName), if it has one; an id too long to be a file name has none.
func removeLegacyRecord(dir, containerID string) error {
	err := os.Remove(filepath.Join(dir, legacyRecordName(containerID)))
	if err == nil || os.IsNotExist(err) || errors.Is(err, syscall.ENAMETOOLONG) {
		return nil
	}
	return err
}

// readRecords reads the endpoint records in dir, in either file format (recordPath,
// legacyRecordName), and returns them in container id order. A record that can't be
// read or parsed, or that is not in its container's file, or that names another veth
// than its container's (which a delete would detach), does not stop the others: its
// file's name is in unreadable (Manager.recordUnreadable finds its container) and the
// error names the file. A container with a record in each format (an agent stopped
// between writing the new one and removing the former) has the new one; the former
// is removed.
func readRecords(dir string) (records []*api.Endpoint, unreadable []string, err error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read endpoint records: %w", err)
	}
	var errs []error
	byID := map[string]*api.Endpoint{}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		ep, err := readRecord(filepath.Join(dir, e.Name()))
		if err != nil {
			unreadable = append(unreadable, e.Name())
			errs = append(errs, err)
			continue
		}
		if _, ok := byID[ep.ContainerID]; ok && e.Name() == legacyRecordName(ep.ContainerID) {
			continue // the new record was read first
		}
		byID[ep.ContainerID] = ep
	}
	for id := range byID {
		records = append(records, byID[id])
		errs = append(errs, removeLegacyRecordBeside(dir, id))
	}
	slices.SortFunc(records, func(a, b *api.Endpoint) int { return cmp.Compare(a.ContainerID, b.ContainerID) })
	return records, unreadable, errors.Join(errs...)
}

// removeLegacyRecordBeside removes containerID's record in the former format if its
// record in the new format is there too: the new one replaced it.
func removeLegacyRecordBeside(dir, containerID string) error {
	if _, err := os.Lstat(recordPath(dir, containerID)); err != nil {
		return nil
	}
	if err := removeLegacyRecord(dir, containerID); err != nil {
		return fmt.Errorf("endpoint record of %s: remove the one in the former format it replaced: %w", containerID, err)
	}
	return nil
}

// readRecord reads the record at path, which must be its container's file in either
// format.
func readRecord(path string) (*api.Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("endpoint record %s: %w", path, err)
	}
	var ep api.Endpoint
	if err := json.Unmarshal(b, &ep); err != nil {
		return nil, fmt.Errorf("endpoint record %s is corrupt (%w); its container keeps its IP until CNI DEL or GC removes it", path, err)
	}
	if err := api.CheckContainerID(ep.ContainerID); err != nil {
		return nil, fmt.Errorf("endpoint record %s: %w; its container keeps its IP until CNI DEL or GC removes it", path, err)
	}
	if name := filepath.Base(path); name != api.RecordFileName(ep.ContainerID) && name != legacyRecordName(ep.ContainerID) {
		return nil, fmt.Errorf("endpoint record %s names container %q, whose record is %s; its container keeps its IP until CNI DEL or GC removes it",
			path, ep.ContainerID, api.RecordFileName(ep.ContainerID))
	}
	if ep.HostIfName != HostIfName(ep.ContainerID) {
		return nil, fmt.Errorf("endpoint record %s names host veth %q, not its container's %s; its container keeps its IP until CNI DEL or GC removes it",
			path, ep.HostIfName, HostIfName(ep.ContainerID))
	}
	return &ep, nil
}
