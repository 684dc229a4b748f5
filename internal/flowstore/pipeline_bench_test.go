package flowstore

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowmetrics"
)

// rawTCP is a struct flow_record of a forwarded SYN from 10.244.1.5:40000 to 10.244.2.7:8080.
func rawTCP() []byte {
	b := make([]byte, 72)
	binary.NativeEndian.PutUint64(b[0:], 12345)
	copy(b[24:28], []byte{10, 244, 1, 5})
	copy(b[28:32], []byte{10, 244, 2, 7})
	binary.NativeEndian.PutUint32(b[36:], 3)
	binary.NativeEndian.PutUint32(b[40:], 60)
	binary.BigEndian.PutUint16(b[44:], 40000)
	binary.BigEndian.PutUint16(b[46:], 8080)
	b[52], b[55], b[56] = 1, 6, 0x02
	return b
}

// batcher hands out the store's slots to convert into, as Feed does: a batch
// (feedBatch) reserved at a time and committed when full.
type batcher struct {
	s    *Store
	dst  []flow.Record
	used int
}

func newBatcher(s *Store) *batcher { return &batcher{s: s} }

// next is the next slot to convert into.
func (b *batcher) next() *flow.Record {
	if b.used == len(b.dst) {
		if b.dst != nil {
			b.s.commit(b.used)
		}
		b.dst, b.used = b.s.reserve(feedBatch), 0
	}
	b.used++
	return &b.dst[b.used-1]
}

// done commits what the last batch holds.
func (b *batcher) done() {
	if b.dst != nil {
		b.s.commit(b.used)
		b.dst = nil
	}
}

// BenchmarkRecordPipeline is what the agent spends per datapath flow record: decode,
// convert and resolve, store with the metrics sink, in batches as Feed stores them.
func BenchmarkRecordPipeline(b *testing.B) {
	raw, boot := rawTCP(), time.Now()
	s := New(4095)
	s.AddSink(flowmetrics.New([]string{"dns", "drop", "tcp", "flow", "icmp", "port-distribution"}, flowmetrics.Options{}))
	bt := newBatcher(s)
	defer bt.done()
	var rec datapath.FlowRecord
	b.ReportAllocs()
	for b.Loop() {
		if err := rec.Decode(raw, boot); err != nil {
			b.Fatal(err)
		}
		recordInto(bt.next(), &rec, fakeResolver{})
	}
}

func BenchmarkDecode(b *testing.B) {
	raw, boot := rawTCP(), time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := datapath.DecodeFlowRecord(raw, boot); err != nil {
			b.Fatal(err)
		}
	}
}

// podsResolver resolves the addresses of n pods from a map, as the agent's pod index does.
type podsResolver map[netip.Addr]*flow.Endpoint

func (r podsResolver) Endpoint(ip netip.Addr) *flow.Endpoint { return r[ip] }

func (podsResolver) Service(netip.AddrPort, uint8) string { return "" }

// BenchmarkRecordPipelineVaried is BenchmarkRecordPipeline over 8,192 different
// records (200 pods, their ports, SYN, SYN-ACK and FIN) fed in turn into a store of the
// default capacity: closer to a lab, where each record comes from ring pages another
// CPU wrote and the store cycles through its whole ring, than one record in cache.
func BenchmarkRecordPipelineVaried(b *testing.B) {
	benchmarkVaried(b, 0)
}

// BenchmarkRecordPipelineColdCache is BenchmarkRecordPipelineVaried in batches
// of 2,048 records with the CPU caches flushed (64 MiB written, outside the timer)
// between batches: in a lab the agent drains the ring every 100 ms, and the pods'
// work in between evicts the store and the metrics from the caches.
func BenchmarkRecordPipelineColdCache(b *testing.B) {
	benchmarkVaried(b, 2048)
}

// benchmarkVaried runs the pipeline over 8,192 different records of 200 pods;
// batch > 0: flushing the caches every batch records.
func benchmarkVaried(b *testing.B, batch int) {
	const pods, records = 200, 8192
	podAddr := func(i int) [4]byte { i %= pods; return [4]byte{10, 244, byte(1 + i/100), byte(2 + i%100)} }
	res := podsResolver{}
	for i := range pods {
		ip := netip.AddrFrom4(podAddr(i))
		res[ip] = &flow.Endpoint{IP: ip.String(), Namespace: "ns" + strconv.Itoa(i%20), Pod: "pod-" + strconv.Itoa(i), Labels: map[string]string{"app": strconv.Itoa(i % 10)}, Node: "n1"}
	}
	raws := make([][]byte, records)
	for i := range raws {
		raw, src, dst := rawTCP(), podAddr(i), podAddr(i*7)
		copy(raw[24:28], src[:])
		copy(raw[28:32], dst[:])
		binary.BigEndian.PutUint16(raw[44:], uint16(32768+i))
		raw[56] = []byte{0x02, 0x12, 0x11}[i%3]
		raws[i] = raw
	}
	var flush []byte
	if batch > 0 {
		flush = make([]byte, 64<<20)
	}
	boot := time.Now()
	s := New(DefaultCapacity)
	s.AddSink(flowmetrics.New([]string{"dns", "drop", "tcp", "flow", "icmp", "port-distribution"}, flowmetrics.Options{}))
	bt := newBatcher(s)
	defer bt.done()
	var rec datapath.FlowRecord
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if batch > 0 && i%batch == 0 {
			b.StopTimer()
			for j := 0; j < len(flush); j += 64 {
				flush[j]++
			}
			b.StartTimer()
		}
		if err := rec.Decode(raws[i%records], boot); err != nil {
			b.Fatal(err)
		}
		recordInto(bt.next(), &rec, res)
		i++
	}
}
