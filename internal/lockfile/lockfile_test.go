package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A second TryLock fails at once naming the holder's pid; after a Release that
// removed the file the lock is free again, and on the path's new file.
func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	first, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := TryLock(path); !errors.Is(err, ErrHeld) || !errors.As(err, &held) || held.PID != strconv.Itoa(os.Getpid()) {
		t.Fatalf("second lock: %v; want ErrHeld naming pid %d", err, os.Getpid())
	}
	first.Release(true)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Release(true): %v; want it gone", err)
	}
	again, err := TryLock(path)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer again.Release(false)
	if _, err := TryLock(path); !errors.Is(err, ErrHeld) {
		t.Errorf("lock on the new file not held: %v", err)
	}
}

// RemoveIfFree leaves a held lock's file and removes one its holder left behind.
func TestRemoveIfFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if removed, err := RemoveIfFree(path); removed || err != nil {
		t.Fatalf("RemoveIfFree of no file = %v, %v; want false, nil", removed, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("RemoveIfFree of no file made one: %v", err)
	}
	held, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveIfFree(path); removed || err != nil {
		t.Fatalf("RemoveIfFree of a held lock = %v, %v; want false, nil", removed, err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrHeld) {
		t.Fatalf("the lock after RemoveIfFree of it while held: %v, want still held", err)
	}
	held.Release(false) // what a killed holder leaves: the file, unlocked
	if removed, err := RemoveIfFree(path); !removed || err != nil {
		t.Fatalf("RemoveIfFree of a left lock file = %v, %v; want true, nil", removed, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the left lock file after RemoveIfFree: %v, want gone", err)
	}
}
