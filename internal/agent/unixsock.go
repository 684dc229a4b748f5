package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// listenUnixPrivate listens on the unix socket sock (replacing a stale one) that only
// root can connect to (0600), whatever the state directory's mode and the umask the
// agent inherited: the API allocates, registers and deletes pods' endpoints, and the
// Hubble socket serves every flow of the node. The socket is made in a directory of
// root's alone (listenHidden) and renamed into place once it is 0600, so there is no
// moment at which another user can connect to it; the rename also replaces a stale
// socket without a moment with none. Close removes sock.
func listenUnixPrivate(sock string) (net.Listener, error) {
	removeStaleHidden(filepath.Dir(sock), time.Now())
	l, hidden, err := listenHidden(sock)
	if err != nil {
		return nil, err
	}
	defer os.Remove(filepath.Dir(hidden))
	if err := os.Rename(hidden, sock); err != nil {
		l.Close()
		os.Remove(hidden)
		return nil, fmt.Errorf("move socket %s into place at %s: %w", hidden, sock, err)
	}
	return &placedListener{UnixListener: l, path: sock}, nil
}

// listenHidden listens on a socket of mode 0600 in a new directory of mode 0700 next
// to sock (in the same directory, so a rename moves it to sock) and returns the
// listener and the socket's path. Only root can reach the socket there: connecting
// takes search permission on the directory. On error nothing is left behind.
func listenHidden(sock string) (*net.UnixListener, string, error) {
	// A short name: a socket's path is at most 107 bytes, and this one should fit
	// wherever sock does.
	dir, err := os.MkdirTemp(filepath.Dir(sock), ".")
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: make a private directory for the new socket: %w", sock, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return nil, "", fmt.Errorf("listen on %s: make %s root's alone: %w", sock, dir, err)
	}
	hidden := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: hidden, Net: "unix"})
	if err != nil {
		os.Remove(dir)
		return nil, "", fmt.Errorf("listen on %s (made as %s): %w", sock, hidden, err)
	}
	// The socket is renamed: closing the listener removes its final path instead.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(hidden, 0o600); err != nil {
		l.Close()
		os.Remove(hidden)
		os.Remove(dir)
		return nil, "", fmt.Errorf("make socket %s root's alone: %w", sock, err)
	}
	return l, hidden, nil
}

// staleHiddenAge is how old a private socket directory must be for removeStaleHidden:
// a listen in progress holds its own for well under a millisecond.
const staleHiddenAge = time.Minute

// removeStaleHidden removes from dir the private directories of listenHidden
// (".<digits>", holding at most the socket "s") that a crash between their making and
// the rename left behind, once older than staleHiddenAge at now (another listener of
// this agent may be between the two steps). Anything else is left alone; failures
// only leave a directory behind, as before.
func removeStaleHidden(dir string, now time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || len(name) < 2 || name[0] != '.' || strings.Trim(name[1:], "0123456789") != "" {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < staleHiddenAge {
			continue
		}
		path := filepath.Join(dir, name)
		os.Remove(filepath.Join(path, "s"))
		os.Remove(path) // fails, leaving it, if it holds anything else
	}
}

// placedListener is a unix listener whose socket was renamed to path: it reports
// path as its address and removes it when closed, as a listener made there would.
type placedListener struct {
	*net.UnixListener
	path   string
	remove sync.Once // the first Close removes path, as net.UnixListener does
}

func (l *placedListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *placedListener) Close() error {
	err := l.UnixListener.Close()
	l.remove.Do(func() { os.Remove(l.path) })
	return err
}
