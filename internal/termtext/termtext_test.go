package termtext

import "testing"

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"node-1 (pod network)": "node-1 (pod network)",
		"évènement":            "évènement",
		"a\x1b[2Jb":            `"a\x1b[2Jb"`,
		"line\nbreak":          `"line\nbreak"`,
		"bad\xffbyte":          `"bad\xffbyte"`,
		"":                     "",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
}
