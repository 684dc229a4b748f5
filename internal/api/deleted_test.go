package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Records round-trip; a repeated DEL (no veth seen) keeps the first record; ids that
// are no CNI container id (path tricks) are refused; a garbled record is named once
// and moved aside.
func TestDeletedRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cni-deleted")
	if recs, err := ReadDeleted(dir); err != nil || len(recs) != 0 {
		t.Fatalf("ReadDeleted of a missing dir = %v, %v", recs, err)
	}
	first := DeletedEndpoint{ContainerID: "abc-1", Pod: "p", HostIfName: HostIfName("abc-1"), HostIfIndex: 7}
	if err := WriteDeleted(dir, first); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeleted(dir, DeletedEndpoint{ContainerID: "abc-1", HostIfName: HostIfName("abc-1")}); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadDeleted(dir)
	if err != nil || len(recs) != 1 || recs[DeletedPath(dir, "abc-1")].HostIfIndex != 7 {
		t.Errorf("records = %+v, %v; want abc-1 with index 7", recs, err)
	}
	for _, bad := range []string{"../x", "", "a/b", ".hidden"} {
		if err := WriteDeleted(dir, DeletedEndpoint{ContainerID: bad}); err == nil {
			t.Errorf("WriteDeleted(%q) succeeded", bad)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if recs, err := ReadDeleted(dir); err == nil || !strings.Contains(err.Error(), "junk.json") || len(recs) != 1 {
		t.Errorf("with a garbled record: %v, %v; want the good one and an error naming junk.json", recs, err)
	}
	// Reported once: it is moved aside, so the agent's loop does not fail every round.
	if _, err := os.Stat(filepath.Join(dir, "junk.json.corrupt")); err != nil {
		t.Errorf("the garbled record was not moved aside to junk.json.corrupt: %v", err)
	}
	if recs, err := ReadDeleted(dir); err != nil || len(recs) != 1 {
		t.Errorf("the round after a garbled record: %v, %v; want the good one and no error", recs, err)
	}
	if n := HostIfName("abc-1"); len(n) != 14 || !strings.HasPrefix(n, "myl") || !IsHostIfName(n) {
		t.Errorf("HostIfName = %q, want myl + 11 hex", n)
	}
	for _, n := range []string{"myl", "myl0123456789", "myl0123456789ab", "myl0123456789A", "myelin_vxlan", "eth0"} {
		if IsHostIfName(n) {
			t.Errorf("IsHostIfName(%q) = true", n)
		}
	}
}

// Any container id the CNI spec allows can be recorded: it sets no length limit, and
// an id of more than 246 bytes made a file name the file system refused (with
// statefile's ".tmp"), so DEL failed while the agent was down.
func TestDeletedRecordOfALongContainerID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cni-deleted")
	id := "c" + strings.Repeat("0123456789abcdef", 64) // 1025 bytes
	if err := WriteDeleted(dir, DeletedEndpoint{ContainerID: id, HostIfName: HostIfName(id), HostIfIndex: 9}); err != nil {
		t.Fatalf("WriteDeleted of a %d-byte container id: %v", len(id), err)
	}
	recs, err := ReadDeleted(dir)
	if err != nil || len(recs) != 1 || recs[DeletedPath(dir, id)].ContainerID != id || recs[DeletedPath(dir, id)].HostIfIndex != 9 {
		t.Errorf("records = %+v, %v; want the whole id with index 9", recs, err)
	}
}

// A record of an id that fits a file name is <id>.json, as every version named it
// (an agent rolled back reads it); a longer id's is named by its hash.
func TestRecordFileName(t *testing.T) {
	short := "c" + strings.Repeat("0123456789abcdef", 16)[:245] // 246 bytes: 255 with ".json.tmp"
	if got := RecordFileName(short); got != short+".json" {
		t.Errorf("RecordFileName of a %d-byte id = %q, want the id and .json", len(short), got)
	}
	long := short + "0"
	if got := RecordFileName(long); len(got) != 64+len(".json") || strings.HasPrefix(got, "c0123") {
		t.Errorf("RecordFileName of a %d-byte id = %q, want its sha256 and .json", len(long), got)
	}
}

// The plugin runs as root: a cni-deleted directory that is a symlink (planted to have
// root write elsewhere) is refused, nothing is written where it points. The agent
// reads no record through a symlink and none without bound; either is moved aside.
func TestDeletedRecordsPlantedFiles(t *testing.T) {
	base := t.TempDir()
	elsewhere := t.TempDir()
	dir := filepath.Join(base, "cni-deleted")
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	rec := DeletedEndpoint{ContainerID: "abc-1", HostIfName: HostIfName("abc-1"), HostIfIndex: 7}
	if err := WriteDeleted(dir, rec); err == nil {
		t.Error("WriteDeleted into a symlinked directory succeeded")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("WriteDeleted wrote %d files where the symlink points", len(entries))
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeleted(dir, rec); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(elsewhere, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"containerID":"from-elsewhere","hostIfName":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "linked.json")); err != nil {
		t.Fatal(err)
	}
	big := `{"containerID":"big","pod":"` + strings.Repeat("p", maxDeletedRecord) + `"}`
	if err := os.WriteFile(filepath.Join(dir, "big.json"), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadDeleted(dir)
	if len(recs) != 1 || recs[DeletedPath(dir, "abc-1")].HostIfIndex != 7 {
		t.Errorf("read %d records, want abc-1's alone", len(recs))
	}
	for _, name := range []string{"linked.json", "big.json"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("ReadDeleted error %v does not name %s", err, name)
		}
		if _, serr := os.Lstat(filepath.Join(dir, name+".corrupt")); serr != nil {
			t.Errorf("%s was not moved aside: %v", name, serr)
		}
	}
	if b, _ := os.ReadFile(secret); !strings.Contains(string(b), "from-elsewhere") {
		t.Errorf("the symlink's target changed: %q", b)
	}
}

// Records of new containers stop at the bound (the DEL fails, and the runtime retries
// it), so DELs while no agent answers can't fill the node's memory; a record that
// replaces one already there is still written.
func TestDeletedRecordsBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cni-deleted")
	for _, id := range []string{"a", "b", "c"} {
		if err := writeDeleted(dir, DeletedEndpoint{ContainerID: id, HostIfIndex: 1}, 3); err != nil {
			t.Fatal(err)
		}
	}
	err := writeDeleted(dir, DeletedEndpoint{ContainerID: "d", HostIfIndex: 1}, 3)
	if err == nil || !strings.Contains(err.Error(), "at most 3") || !strings.Contains(err.Error(), "start the myelin agent") {
		t.Errorf("a 4th record with a bound of 3: %v, want refused naming the bound and the fix", err)
	}
	if err := writeDeleted(dir, DeletedEndpoint{ContainerID: "b", HostIfIndex: 2}, 3); err != nil {
		t.Errorf("replacing b's record at the bound: %v", err)
	}
	if recs, err := ReadDeleted(dir); err != nil || len(recs) != 3 || recs[DeletedPath(dir, "b")].HostIfIndex != 2 {
		t.Errorf("records = %v, %v; want a, b (index 2), c", recs, err)
	}
}

// ClaimDeleted renames records to their claimed name before reading them; a claim a
// crash left is returned again; a record of a container whose claim is still there
// waits for the next round; a garbled record is moved aside, claimed or not; a
// repeated DEL (no veth) keeps a claimed record as it keeps an unclaimed one.
func TestClaimDeleted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cni-deleted")
	if recs, err := ClaimDeleted(dir); err != nil || len(recs) != 0 {
		t.Fatalf("ClaimDeleted of a missing dir = %v, %v", recs, err)
	}
	if err := WriteDeleted(dir, DeletedEndpoint{ContainerID: "a", HostIfIndex: 7}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := ClaimDeleted(dir)
	claimedA := DeletedPath(dir, "a") + ".claimed"
	if len(recs) != 1 || recs[claimedA].HostIfIndex != 7 || err == nil || !strings.Contains(err.Error(), "junk.json") {
		t.Errorf("first claim = %+v, %v; want a's record at %s and an error naming junk.json", recs, err, claimedA)
	}
	if _, err := os.Lstat(DeletedPath(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("a.json is still there after its claim: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "junk.json.claimed.corrupt")); err != nil {
		t.Errorf("the garbled record was not moved aside: %v", err)
	}
	if err := WriteDeleted(dir, DeletedEndpoint{ContainerID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(DeletedPath(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("a repeated DEL (no veth) wrote a record beside a's claimed one: %v", err)
	}
	if err := WriteDeleted(dir, DeletedEndpoint{ContainerID: "a", HostIfIndex: 9}); err != nil {
		t.Fatal(err)
	}
	// The agent crashed before it removed the claim: the claim is carried out again,
	// the newer record waits for it.
	recs, err = ClaimDeleted(dir)
	if err != nil || len(recs) != 1 || recs[claimedA].HostIfIndex != 7 {
		t.Errorf("claim after a crash = %+v, %v; want a's claimed record (index 7) alone", recs, err)
	}
	if err := os.Remove(claimedA); err != nil {
		t.Fatal(err)
	}
	recs, err = ClaimDeleted(dir)
	if err != nil || len(recs) != 1 || recs[claimedA].HostIfIndex != 9 {
		t.Errorf("claim after the first was carried out = %+v, %v; want the newer record (index 9)", recs, err)
	}
}
