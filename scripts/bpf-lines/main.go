// Command bpf-lines charges perf samples to the source lines of a loaded BPF
// program: where a program spends its time on the real packet path, on a
// machine whose perf can't annotate BPF (no libopcodes) or sample a PMU.
//
//	perf record -C 0 -g -o X.data -- sleep 15     # while the traffic runs
//	perf script -i X.data -F ip -G | go run ./scripts/bpf-lines -prog ID
//
// ID is the program's (bpftool net show, in the node's netns). Each sample
// whose address lies in the program or one of its BPF-to-BPF functions is
// charged to the line the JIT's line info names for it; -addrs FILE also
// writes the samples per address and -image FILE the JIT image (the
// functions one after another, as -addrs lists their start addresses), for
// objdump -D -b binary -mi386:x86-64 --adjust-vma=START. Timer samples in a VM
// land on the instruction that was waiting: a load that missed the cache
// shows as the instruction after it.
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

func main() {
	id := flag.Int("prog", 0, "the program's id")
	addrs := flag.String("addrs", "", "also write the samples per address to this file")
	image := flag.String("image", "", "also write the JIT image to this file")
	flag.Parse()
	if err := run(ebpf.ProgramID(*id), os.Stdin, os.Stdout, *addrs, *image); err != nil {
		fmt.Fprintln(os.Stderr, "bpf-lines:", err)
		os.Exit(1)
	}
}

// jitLine is where the JIT put the code of one line info: its address and the line.
type jitLine struct {
	addr uint64
	text string
}

func run(id ebpf.ProgramID, samples io.Reader, out io.Writer, addrsFile, imageFile string) error {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return fmt.Errorf("program %d: %w", id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return err
	}
	lines, err := jitLines(info)
	if err != nil {
		return err
	}
	starts, _ := info.JitedKsymAddrs()
	lens, _ := info.JitedFuncLens()
	if len(starts) != len(lens) {
		return fmt.Errorf("program %d: %d functions but %d lengths", id, len(starts), len(lens))
	}
	inProg := func(a uint64) bool {
		for i, s := range starts {
			if uint64(s) <= a && a < uint64(s)+uint64(lens[i]) {
				return true
			}
		}
		return false
	}
	perLine, perAddr, total := map[string]int{}, map[uint64]int{}, 0
	sc := bufio.NewScanner(samples)
	for sc.Scan() {
		a, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 16, 64)
		if err != nil || !inProg(a) {
			continue
		}
		i, _ := slices.BinarySearchFunc(lines, a, func(l jitLine, a uint64) int {
			return cmp.Compare(l.addr, a+1)
		})
		if i == 0 {
			continue
		}
		perLine[lines[i-1].text]++
		perAddr[a]++
		total++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if err := writeExtras(info, starts, lens, perAddr, addrsFile, imageFile); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d samples in program %d\n", total, id)
	keys := slices.SortedFunc(maps.Keys(perLine), func(a, b string) int { return cmp.Or(cmp.Compare(perLine[b], perLine[a]), cmp.Compare(a, b)) })
	for _, k := range keys {
		fmt.Fprintf(out, "%6d %5.1f%%  %s\n", perLine[k], 100*float64(perLine[k])/float64(total), k)
	}
	return nil
}

// jitLines pairs the program's line infos with the addresses the JIT gave them, by address.
func jitLines(info *ebpf.ProgramInfo) ([]jitLine, error) {
	addrs, ok := info.JitedLineInfos()
	if !ok {
		return nil, fmt.Errorf("the kernel gave no JIT line info (not JITed, or no BTF)")
	}
	infos, err := info.LineInfos()
	if err != nil {
		return nil, fmt.Errorf("line info: %w", err)
	}
	if len(infos) != len(addrs) {
		return nil, fmt.Errorf("%d line infos but %d JIT addresses", len(infos), len(addrs))
	}
	out := make([]jitLine, len(infos))
	for i, l := range infos {
		out[i] = jitLine{addrs[i], fmt.Sprintf("%s:%d %s", l.Line.FileName(), l.Line.LineNumber(), strings.TrimSpace(l.Line.Line()))}
	}
	slices.SortStableFunc(out, func(a, b jitLine) int { return cmp.Compare(a.addr, b.addr) })
	return out, nil
}

// writeExtras writes the per-address samples (after the functions' start
// addresses and lengths) and the JIT image, each if asked for.
func writeExtras(info *ebpf.ProgramInfo, starts []uintptr, lens []uint32, perAddr map[uint64]int, addrsFile, imageFile string) error {
	if addrsFile != "" {
		var b strings.Builder
		for i, s := range starts {
			fmt.Fprintf(&b, "function %x %d\n", s, lens[i])
		}
		for _, a := range slices.Sorted(maps.Keys(perAddr)) {
			fmt.Fprintf(&b, "%x %d\n", a, perAddr[a])
		}
		if err := os.WriteFile(addrsFile, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if imageFile != "" {
		insns, ok := info.JitedInsns()
		if !ok {
			return fmt.Errorf("the kernel gave no JIT image")
		}
		return os.WriteFile(imageFile, insns, 0o644)
	}
	return nil
}
