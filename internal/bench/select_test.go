package bench

import (
	"errors"
	"reflect"
	"testing"
)

func names(cases []Case) []string {
	var out []string
	for _, c := range cases {
		out = append(out, c.Name)
	}
	return out
}

func TestSelect(t *testing.T) {
	all := Catalog("bhtest-")
	for _, tc := range []struct {
		patterns []string
		want     []string
	}{
		{[]string{"loopback/tcp-rr/same-vcpu"}, []string{"loopback/tcp-rr/same-vcpu"}},
		// A veth case brings its loopback baseline along, in catalog order.
		{[]string{"veth-pair/tcp-crr"}, []string{"loopback/tcp-crr/same-vcpu", "loopback/tcp-crr/cross-vcpu",
			"veth-pair/tcp-crr/same-vcpu", "veth-pair/tcp-crr/cross-vcpu"}},
		{[]string{"*/udp-loss/cross-vcpu"}, []string{"loopback/udp-loss/cross-vcpu", "veth-pair/udp-loss/cross-vcpu"}},
		// A glob of a leading part selects everything under it.
		{[]string{"svc-*-10/*/same-vcpu"}, []string{"svc-myelin-10/direct-crr/same-vcpu", "svc-myelin-10/svc-crr/same-vcpu",
			"svc-iptables-10/direct-crr/same-vcpu", "svc-iptables-10/svc-crr/same-vcpu",
			"svc-nftables-10/direct-crr/same-vcpu", "svc-nftables-10/svc-crr/same-vcpu",
			"svc-myelin-socklb-10/direct-crr/same-vcpu", "svc-myelin-socklb-10/svc-crr/same-vcpu"}},
	} {
		got, err := Select(all, tc.patterns)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(names(got), tc.want) {
			t.Errorf("Select(%v) = %v, want %v", tc.patterns, names(got), tc.want)
		}
	}
	if got, _ := Select(all, nil); len(got) != len(all) {
		t.Errorf("Select without patterns = %d cases, want all %d", len(got), len(all))
	}
	if _, err := Select(all, []string{"veth"}); !errors.Is(err, ErrNoSuchCase) {
		t.Errorf("Select(veth) error = %v, want ErrNoSuchCase (only whole name parts match)", err)
	}
	if got, err := Select(all, []string{"svc-*"}); err != nil || len(got) != 4*3*len(ServiceCounts)+len(SockLBCases()) {
		t.Errorf("Select(svc-*) = %v (%v), want every Service scale and socket-LB case", names(got), err)
	}
	quick, err := Select(all, QuickNoLabCases)
	if err != nil || len(quick) == 0 || len(quick) > 4 {
		t.Errorf("the quick set = %v (%v), want a few cases", names(quick), err)
	}
}

func TestValidate(t *testing.T) {
	env, w := &fakeEnv{name: "e"}, &fakeWorkload{}
	for _, tc := range []struct {
		name  string
		cases []Case
	}{
		{"duplicate", []Case{{Name: "a", Env: env, Workload: w}, {Name: "a", Env: env, Workload: w}}},
		{"missing baseline", []Case{{Name: "a", Env: env, Workload: w, Baseline: "b"}}},
		{"baseline in another stage", []Case{{Name: "a", Env: env, Workload: w},
			{Name: "b", Stage: "tunnel", Env: env, Workload: w, Baseline: "a"}}},
		{"no workload", []Case{{Name: "a", Env: env}}},
	} {
		if err := Validate(tc.cases); err == nil {
			t.Errorf("%s: Validate accepted %v", tc.name, names(tc.cases))
		}
	}
	if err := Validate(Catalog("bhtest-")); err != nil {
		t.Errorf("the catalog is invalid: %v", err)
	}
}
