package flowstore

import (
	"encoding/binary"
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

// BenchmarkRecordPipeline is what the agent spends per datapath flow record: decode,
// convert and resolve, store with the metrics sink.
func BenchmarkRecordPipeline(b *testing.B) {
	raw, boot := rawTCP(), time.Now()
	s := New(4095)
	s.AddSink(flowmetrics.New([]string{"dns", "drop", "tcp", "flow", "icmp", "port-distribution"}, flowmetrics.Options{}))
	o := Origin{Node: "n1", HostRouting: "bpf"}
	var names addrNames
	var f flow.Flow // Feed's reused Flow
	b.ReportAllocs()
	for b.Loop() {
		rec, err := datapath.DecodeFlowRecord(raw, boot)
		if err != nil {
			b.Fatal(err)
		}
		convertInto(&f, rec, o, fakeResolver{}, &names)
		s.Add(&f)
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
