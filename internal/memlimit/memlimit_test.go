package memlimit

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Setting
		bad  bool
	}{
		{in: "auto", want: Auto},
		{in: "off", want: Off},
		{in: "96Mi", want: Bytes(96 << 20)},
		{in: "1Gi", want: Bytes(1 << 30)},
		{in: "200M", want: Bytes(200e6)},
		{in: "16Mi", bad: true},
		{in: "2Ti", bad: true},
		{in: "lots", bad: true},
		{in: "", bad: true},
		{in: "-1Gi", bad: true},
	} {
		got, err := Parse(tc.in)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "auto, off, or a size") {
				t.Errorf("Parse(%q) = %v, %v; want an error naming what is allowed", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s         Setting
		cgroupMax int64
		env       string
		want      Decision
	}{
		{name: "fixed wins over everything", s: Bytes(96 << 20), cgroupMax: 1 << 30, env: "50MiB", want: Decision{Limit: 96 << 20}},
		{name: "off", s: Off, cgroupMax: 1 << 30, want: Decision{Limit: math.MaxInt64}},
		{name: "auto keeps GOMEMLIMIT", s: Auto, cgroupMax: 1 << 30, env: "200MiB", want: Decision{Limit: -1}},
		{name: "auto: 90% of the cgroup", s: Auto, cgroupMax: 200 << 20, want: Decision{Limit: 180 << 20}},
		{name: "auto without limits follows the heap", s: Auto, want: Decision{Limit: math.MaxInt64, Follow: true}},
	} {
		got := Decide(tc.s, tc.cgroupMax, tc.env)
		if got.Limit != tc.want.Limit || got.Follow != tc.want.Follow || got.Reason == "" {
			t.Errorf("%s: Decide = %+v, want %+v with a reason", tc.name, got, tc.want)
		}
	}
}

func TestFollowPercent(t *testing.T) {
	for _, tc := range []struct {
		live int64
		want int // heap goal live x (1 + want/100)
	}{
		{live: 10 << 20, want: 300}, // 40 MiB: the floor
		{live: 20 << 20, want: 100}, // 40 MiB: the floor
		{live: 40 << 20, want: 50},  // 60 MiB: 1.5x, above the floor
		{live: 200 << 20, want: 50}, // 300 MiB
		{live: 0, want: 100},        // nothing measured yet: the default
	} {
		if got := followPercent(Floor, tc.live); got != tc.want {
			t.Errorf("live heap %d MiB: GC percent %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

func TestTightestLimit(t *testing.T) {
	files := map[string]string{
		"/cg/kubepods/memory.max":         "536870912\n",
		"/cg/kubepods/pod1/memory.max":    "max\n",
		"/cg/kubepods/pod1/c1/memory.max": "209715200\n",
		"/cg/system/memory.max":           "max\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	for _, tc := range []struct {
		self string
		want int64
	}{
		{self: "0::/kubepods/pod1/c1\n", want: 200 << 20},
		{self: "0::/kubepods/pod1\n", want: 512 << 20},
		{self: "0::/system\n", want: 0},
		{self: "0::/\n", want: 0},
	} {
		got, err := tightestLimit("/cg", tc.self, read)
		if err != nil || got != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.self, got, err, tc.want)
		}
	}
	if _, err := tightestLimit("/cg", "1:name=systemd:/x\n", read); err == nil {
		t.Error("cgroup v1 only: no error")
	}
}
