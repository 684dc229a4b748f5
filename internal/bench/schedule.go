package bench

// A Slot is one run in the schedule: a case in a round (rounds count from 1).
type Slot struct {
	Round int
	Case  string
}

// Schedule interleaves the cases round-robin: every case once in round 1, in the given
// order, then every case in round 2, and so on, so that drift of the machine (other load,
// thermal state, caches) hits every case alike instead of favouring the ones run first.
func Schedule(cases []string, rounds int) []Slot {
	out := make([]Slot, 0, len(cases)*max(rounds, 0))
	for r := 1; r <= rounds; r++ {
		for _, c := range cases {
			out = append(out, Slot{Round: r, Case: c})
		}
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
