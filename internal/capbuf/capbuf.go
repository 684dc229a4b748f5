// Package capbuf is a bounded output buffer: what commands run for a bug report
// (`myelin sysdump` through pods/exec or nsenter) write into, so a command that prints
// without end (a map of a million flows, a hung loop) can't fill the caller's memory.
package capbuf

import (
	"fmt"
	"sync"
)

// Buffer keeps the first Max bytes written to it and drops the rest; it is safe for
// the concurrent writes of a command's stdout and stderr.
type Buffer struct {
	max    int
	onFull func()

	mu        sync.Mutex
	buf       []byte
	truncated bool
}

// New returns a Buffer keeping max bytes; onFull (if not nil) is called once, when
// the first byte beyond them arrives: the place to stop the command.
func New(max int, onFull func()) *Buffer { return &Buffer{max: max, onFull: onFull} }

// Write keeps what fits and never fails, so the command's stream is not broken by
// the bound.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	room := b.max - len(b.buf)
	first := false
	if len(p) > room {
		first = !b.truncated
		b.truncated = true
		b.buf = append(b.buf, p[:max(room, 0)]...)
	} else {
		b.buf = append(b.buf, p...)
	}
	b.mu.Unlock()
	if first && b.onFull != nil {
		b.onFull()
	}
	return len(p), nil
}

// Bytes is what was kept.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

// Err is nil when everything written was kept, else an error saying where the
// output was cut.
func (b *Buffer) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.truncated {
		return fmt.Errorf("output truncated at %d bytes", b.max)
	}
	return nil
}
