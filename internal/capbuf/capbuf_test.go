package capbuf

import (
	"strings"
	"testing"
)

// The buffer keeps the first max bytes, says where it cut, and asks to stop the
// writer once.
func TestBuffer(t *testing.T) {
	full := 0
	b := New(10, func() { full++ })
	for _, s := range []string{"12345", "6789", "abc", "def"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := string(b.Bytes()); got != "123456789a" {
		t.Errorf("kept %q, want the first 10 bytes", got)
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "truncated at 10 bytes") {
		t.Errorf("Err() = %v, want truncated at 10 bytes", err)
	}
	if full != 1 {
		t.Errorf("onFull called %d times, want once", full)
	}
}

// Output that fits is kept whole, without an error.
func TestBufferFits(t *testing.T) {
	b := New(10, nil)
	b.Write([]byte("0123456789"))
	if got := string(b.Bytes()); got != "0123456789" || b.Err() != nil {
		t.Errorf("kept %q, %v; want all 10 bytes, no error", got, b.Err())
	}
}
