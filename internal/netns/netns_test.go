package netns

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/myelin-net/myelin/internal/testenv"
)

// IsMachine is true in the machine's network namespace (known here by the kernel's
// fixed inode number, where it has one) and false inside a namespace of its own (not
// named myelin-*: that prefix is the lab's, whose leftover checks run alongside).
func TestPrivilegedIsMachine(t *testing.T) {
	testenv.RequireRoot(t, "create a network namespace")
	self, err := nsInode("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	machine, err := IsMachine()
	if err != nil {
		t.Fatal(err)
	}
	if self == procNetInitIno && !machine {
		t.Errorf("IsMachine() = false in the initial network namespace (inode %#x)", self)
	}
	name := fmt.Sprintf("netnstest-ismachine-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	err = Do(Path(name), func() error {
		machine, err := IsMachine()
		if err != nil || machine {
			return fmt.Errorf("IsMachine() = %v, %v inside %s, want false", machine, err, name)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
