package bench

// A Slot is one run in the schedule: a case in a round (rounds count from 1).
type Slot struct {
	Round int
	Case  string
}

// Schedule interleaves the cases round-robin: every case once in round 1, then every
// case in round 2, and so on, so that drift of the machine (other load, thermal state,
// caches, the VM's host) hits every case alike instead of favouring the ones run first.
// Within a round each case runs next to its baseline (pairOrder), and every second round
// runs in reverse, so that a drift of the machine within a round hits a case and its
// baseline alike, and the reversal cancels what is left of a steady drift over two
// rounds. It does not help against faster noise: on 2026-11-28 adjacent 3 s runs still
// differed by up to 15% (docs/bench/2026-11-28/policy-flows).
func Schedule(cases []Case, rounds int) []Slot {
	return scheduleRounds(cases, 1, rounds)
}

// scheduleRounds is Schedule's rounds first..last (round numbers decide the direction).
func scheduleRounds(cases []Case, first, last int) []Slot {
	order := pairOrder(cases)
	out := make([]Slot, 0, len(order)*max(last-first+1, 0))
	for r := first; r <= last; r++ {
		for i := range order {
			c := order[i]
			if r%2 == 0 {
				c = order[len(order)-1-i]
			}
			out = append(out, Slot{Round: r, Case: c})
		}
	}
	return out
}

// pairOrder orders the case names so that each case directly follows its baseline when
// that is one of the cases: depth first through the baseline trees, roots and siblings
// in their given order.
func pairOrder(cases []Case) []string {
	in := map[string]bool{}
	for _, c := range cases {
		in[c.Name] = true
	}
	children := map[string][]string{}
	var roots []string
	for _, c := range cases {
		if c.Baseline != "" && in[c.Baseline] && c.Baseline != c.Name {
			children[c.Baseline] = append(children[c.Baseline], c.Name)
		} else {
			roots = append(roots, c.Name)
		}
	}
	out := make([]string, 0, len(cases))
	var walk func(string)
	walk = func(name string) {
		out = append(out, name)
		for _, ch := range children[name] {
			walk(ch)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// stages splits cases into their stages, keeping the order in which each stage first
// appears and the order of cases within it.
func stages(cases []Case) [][]Case {
	index := map[string]int{}
	var out [][]Case
	for _, c := range cases {
		i, ok := index[c.Stage]
		if !ok {
			i = len(out)
			index[c.Stage] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], c)
	}
	return out
}
