package datapath

// The BPF object and its Go bindings (types, loader) are generated from
// bpf/myelin.c; regenerate with `go generate ./internal/datapath/` after any
// change under bpf/. The -I adds the multiarch directory that holds
// <asm/types.h> on Debian, which clang -target bpf does not search.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel -type endpoint_info -type tunnel_lpm_key -type tunnel_endpoint -type nat_key -type nat_entry -type nat_dir -type nat_flags -type nomasq_key -type lb_svc_key -type lb_svc -type lb_svc_flags -type lb_slot_key -type lb_backend -type lb_affinity_key -type lb_affinity -type ct_key -type ct_entry -type ct_dir -type ct_flags -type frag_key -type frag_entry -type frag_stage -type icmp_rate -type np_entry -type np_stat -type policy_ep -type policy_key -type policy_port -type policy_value -type ipcache_key -type ipcache_value -type policy_ct_key -type policy_ct_entry -type policy_ct_slot -type policy_ct_ends -type policy_ct_closing -type policy_ct_stat -type policy_ct_ref -type policy_flags -type policy_dir -type event -type flow_record -type flow_dns_record -type flow_kind -type flow_key -type flow_state -type metrics_value -type event_type -type reason -type direction myelin ../../bpf/myelin.c -- -mcpu=v3 -Wall -Werror -I/usr/include/x86_64-linux-gnu

// The socket-LB programs (bpf/sock.c, cgroup connect4/sendmsg4/recvmsg4/
// getpeername4) are an object of their own: a kernel or cgroup setup that
// can't load or attach them must leave the tc datapath whole (socklb.go).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel -type lb_sock_rev_key -type lb_sock_rev -type lb_sock_peer sock ../../bpf/sock.c -- -mcpu=v3 -Wall -Werror -I/usr/include/x86_64-linux-gnu
