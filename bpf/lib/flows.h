/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Flow records for the agent's flow store (docs/observability.md), written
 * while the agent has flows_enabled set: drops to myelin_flow_drops, the
 * rest to myelin_flows. Called from the
 * verdict helpers (lib/verdict.h), so every program reports through one place:
 *
 *   - every drop, with its reason (FLOW_DROP);
 *   - TCP packets with SYN, FIN or RST (FLOW_TCP): new connections and their
 *     state changes. Any other TCP packet costs one read of its header's
 *     start (straight from the linear data, l4_load_head), no map lookup;
 *     a reported one takes its ports from the same read;
 *   - UDP/ICMP/other: the first packet of a flow (FLOW_NEW), then at most one
 *     summary with its packets and bytes every FLOW_SUMMARY_NS (FLOW_SUMMARY),
 *     aggregated in myelin_flow_state: the ports read in place (flows_ports)
 *     and one lookup per packet;
 *   - UDP to or from port 53 (FLOW_DNS): every packet, with up to
 *     FLOW_DNS_CAPTURE bytes of its payload.
 *
 * DNS and drop records have a budget (flows_allow, myelin_flow_limit): at
 * most FLOW_DNS_BUDGET DNS records, and FLOW_DROP_BUDGET drops of each
 * reason, per window of 2^FLOW_LIMIT_WINDOW_SHIFT ns (1.07 s), program
 * direction and pod (its veth; from the uplink or overlay: the local pod a
 * packet is delivered to, or the device for drops). Past it a record is
 * counted as REASON_FLOWS_LIMITED, so one pod's flood can't fill the ring
 * and push out other pods' records. TCP records and established TCP take no
 * budget (no lookup).
 *
 * A forwarded packet is reported where it leaves a pod (from_pod) and where
 * it enters one: to_pod, or from_netdev/from_overlay when BPF delivers it to
 * a local endpoint; the uplink's egress and the node's own traffic are not.
 * A full ring counts REASON_FLOWS_LOST and never changes the packet's fate.
 * Drops have a ring of their own, so no flood of forwarded records (TCP
 * connections and new UDP flows have no budget) can hide the drops and
 * policy denials of every pod while the agent catches up.
 * A record names the Service a packet went through: the frontend the tc path
 * translated, or, for a connection socket-LB translated before tc saw it, the
 * one its socket was translated from (flows_sock_service).
 */
#ifndef MYELIN_LIB_FLOWS_H
#define MYELIN_LIB_FLOWS_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "clock.h"
#include "config.h"
#include "ipv4.h"
#include "l4.h"
#include "maps.h"
#include "metrics.h"
#include "sock.h"

/* flows_enabled is set by the agent with enable-hubble (.bss: runtime switch). */
volatile __u32 flows_enabled = 0;

#define FLOW_SUMMARY_NS	  (30ULL * 1000 * 1000 * 1000)
#define FLOW_TCP_REPORTED 0x07 /* FIN, SYN, RST */
#define FLOW_TCP_SYNACK	  0x12
#define FLOW_DNS_PORT	  bpf_htons(53)
#define FLOW_UDP_HLEN	  8

#define FLOW_LIMIT_WINDOW_SHIFT 30 /* 1.07 s */
#define FLOW_DNS_BUDGET		128
#define FLOW_DROP_BUDGET	64

/*
 * flows_sock_service names the Service of a packet socket-LB translated at
 * connect() or sendmsg(): the tc path saw no frontend, but the packet still
 * carries its socket (veth keeps skb->sk where it leaves the pod; a node
 * process's packet has it too). A socket connect4 translated has the
 * frontend in its storage (myelin_lb_sock_peer); a UDP datagram sendmsg4
 * translated, in myelin_lb_sock_rev. Runs only for a record, never per
 * packet; a packet without a socket costs nothing more.
 */
static __always_inline void flows_sock_service(struct __sk_buff *skb, struct flow_record *r)
{
	const struct lb_sock_rev *v;
	struct bpf_sock *sk = skb->sk;

	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return;
	v = lb_sock_frontend(skb, sk, r->daddr, r->dport, r->proto == IPPROTO_UDP);
	if (!v)
		return;
	r->svc_addr = v->addr;
	r->svc_port = v->port;
}

/*
 * flows_from_local_socket: r (its dir and TCP flags set) may be a packet a
 * socket of this node sent after socket-LB translated it: TCP or UDP without
 * a frontend, leaving a pod or delivered by the stack into one (a node
 * process), and no SYN-ACK (a server's answer is never translated). Elsewhere
 * the socket a packet carries is remote or none, and the lookup would miss.
 */
static __always_inline int flows_from_local_socket(const struct ipv4_info *info,
						   const struct flow_record *r)
{
	if (r->svc_addr || (r->dir != DIR_FROM_POD && r->dir != DIR_TO_POD))
		return 0;
	if (info->proto == IPPROTO_UDP)
		return 1;
	return info->proto == IPPROTO_TCP && (r->tcp_flags & FLOW_TCP_SYNACK) != FLOW_TCP_SYNACK;
}

/*
 * flows_ports reads the first four bytes of the L4 header at info->l4_off
 * (TCP/UDP ports; ICMP type, code and checksum) into ports: straight from
 * the linear data when they lie there (no helper call), else through
 * bpf_skb_load_bytes. Returns 0, or a negative value when the packet ends
 * first. Four bytes, not an l4_head: the programs' call chains through
 * flows_forward are at the 512-byte stack limit.
 */
static __always_inline int flows_ports(struct __sk_buff *skb, const struct ipv4_info *info,
				       __be16 ports[2])
{
	const __be16 *p = l4_linear(skb, info->l4_off, 2 * sizeof(__be16));

	if (!p)
		return bpf_skb_load_bytes(skb, info->l4_off, ports, 2 * sizeof(__be16));
	ports[0] = p[0];
	ports[1] = p[1];
	return 0;
}

/*
 * flows_fill sets the record's common fields and, unless ports_set (the
 * caller read them with the TCP flags), its ports (ICMP: type and code);
 * r->tcp_flags is set before it.
 */
static __always_inline void flows_fill(struct __sk_buff *skb, const struct ipv4_info *info,
				       struct flow_record *r, __u8 kind, __u8 dir, __u8 reason,
				       int ports_set)
{
	r->ktime = bpf_ktime_get_ns();
	r->kind = kind;
	r->reason = reason;
	r->dir = dir;
	r->proto = info->proto;
	r->ifindex = skb->ifindex;
	r->len = skb->len;
	r->saddr = info->saddr;
	r->daddr = info->daddr;
	r->svc_addr = info->svc_addr;
	r->svc_port = info->svc_port;
	if (info->l4_off && !ports_set) {
		__be16 ports[2] = {};

		if (flows_ports(skb, info, ports) == 0) {
			r->sport = ports[0];
			r->dport = ports[1];
		}
	}
	if (lb_enabled && sock_lb && flows_from_local_socket(info, r))
		flows_sock_service(skb, r);
}

/*
 * flows_wakeup: records wake the agent only once a quarter of their ring
 * (of size bytes) is used; it reads both rings every 100 ms
 * (datapath.FlowReader). A wakeup per
 * record would cost a context switch per new connection.
 */
static __always_inline __u64 flows_wakeup(void *ring, __u64 size)
{
	if (bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= size / 4)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void flows_lost(struct __sk_buff *skb, __u8 dir)
{
	metrics_add(dir, REASON_FLOWS_LOST, skb->len);
}

/*
 * flows_allow spends one record of the budget of kind (and reason) for this
 * packet's pod; 0, counted as REASON_FLOWS_LIMITED, when it is spent.
 */
static __always_inline int flows_allow(struct __sk_buff *skb, const struct ipv4_info *info,
				       __u8 kind, __u8 dir, __u8 reason, __u64 budget)
{
	struct flow_limit_key k = {
		.ifindex = skb->ifindex, .kind = kind, .reason = reason, .dir = dir};
	__u64 window = clock_coarse_ns() >> FLOW_LIMIT_WINDOW_SHIFT;
	struct flow_limit fresh = {.window = window, .records = 1}, *l;

	if (dir == DIR_FROM_POD) /* the veth it entered on, as the source check uses */
		k.ifindex = skb->ingress_ifindex;
	else if (dir != DIR_TO_POD && kind != FLOW_DROP)
		k.addr = info->daddr; /* a local pod (flows_reported_dir) */
	l = bpf_map_lookup_elem(&myelin_flow_limit, &k);
	if (!l) {
		bpf_map_update_elem(&myelin_flow_limit, &k, &fresh, BPF_ANY);
		return 1;
	}
	if (l->window != window) {
		l->window = window;
		l->records = 1;
		return 1;
	}
	if (__sync_fetch_and_add(&l->records, 1) < budget)
		return 1;
	metrics_add(dir, REASON_FLOWS_LIMITED, skb->len);
	return 0;
}

/*
 * flows_emit writes one fixed-size record, in place in the ring (no stack
 * copy): a drop's to myelin_flow_drops, any other to myelin_flows. tcp, when
 * set, is the TCP header's start the caller read (its ports).
 */
static __always_inline void flows_emit(struct __sk_buff *skb, const struct ipv4_info *info,
				       __u8 kind, __u8 dir, __u8 reason, __u8 tcp_flags,
				       const struct flow_state *st, const struct l4_head *tcp)
{
	void *ring = kind == FLOW_DROP ? (void *)&myelin_flow_drops : (void *)&myelin_flows;
	__u64 size = kind == FLOW_DROP ? DROPS_RINGBUF_SIZE : FLOWS_RINGBUF_SIZE;
	struct flow_record *r;

	r = bpf_ringbuf_reserve(ring, sizeof(*r), 0);
	if (!r) {
		flows_lost(skb, dir);
		return;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->tcp_flags = tcp_flags;
	if (tcp) {
		r->sport = tcp->sport;
		r->dport = tcp->dport;
	}
	flows_fill(skb, info, r, kind, dir, reason, tcp != NULL);
	if (st) {
		r->packets = st->packets;
		r->bytes = st->bytes;
	}
	bpf_ringbuf_submit(r, flows_wakeup(ring, size));
}

/* flows_dns writes a UDP/53 packet's record with the start of its payload. */
static __always_inline void flows_dns(struct __sk_buff *skb, const struct ipv4_info *info, __u8 dir)
{
	__u32 off = info->l4_off + FLOW_UDP_HLEN, n;
	struct flow_dns_record *d;

	if (!flows_allow(skb, info, FLOW_DNS, dir, REASON_FORWARDED, FLOW_DNS_BUDGET))
		return;
	d = bpf_ringbuf_reserve(&myelin_flows, sizeof(*d), 0);
	if (!d) {
		flows_lost(skb, dir);
		return;
	}
	__builtin_memset(d, 0, sizeof(*d)); /* no stale ring bytes past the payload */
	flows_fill(skb, info, &d->hdr, FLOW_DNS, dir, REASON_FORWARDED, 0);
	n = skb->len > off ? skb->len - off : 0;
	if (n > FLOW_DNS_CAPTURE)
		n = FLOW_DNS_CAPTURE;
	if (n == 0 || bpf_skb_load_bytes(skb, off, d->payload, n) < 0)
		n = 0;
	d->hdr.payload_len = n;
	bpf_ringbuf_submit(d, flows_wakeup(&myelin_flows, FLOWS_RINGBUF_SIZE));
}

/* flows_is_dns: a UDP packet to or from port 53. */
static __always_inline int flows_is_dns(struct __sk_buff *skb, const struct ipv4_info *info)
{
	__be16 ports[2];

	if (flows_ports(skb, info, ports) < 0)
		return 0;
	return ports[0] == FLOW_DNS_PORT || ports[1] == FLOW_DNS_PORT;
}

/* flows_aggregate reports a UDP/ICMP/other packet: new flows and periodic summaries. */
static __always_inline void flows_aggregate(struct __sk_buff *skb, const struct ipv4_info *info,
					    __u8 dir)
{
	struct flow_key k = {
		.saddr = info->saddr, .daddr = info->daddr, .proto = info->proto, .dir = dir};
	struct flow_state fresh = {}, *st;
	__u64 now = clock_coarse_ns();
	__be16 ports[2] = {};

	if (flows_ports(skb, info, ports) == 0 && info->proto != IPPROTO_ICMP) {
		k.sport = ports[0];
		k.dport = ports[1];
	}
	st = bpf_map_lookup_elem(&myelin_flow_state, &k);
	if (!st) {
		fresh.last = now;
		bpf_map_update_elem(&myelin_flow_state, &k, &fresh, BPF_ANY);
		flows_emit(skb, info, FLOW_NEW, dir, REASON_FORWARDED, 0, NULL, NULL);
		return;
	}
	__sync_fetch_and_add(&st->packets, 1);
	__sync_fetch_and_add(&st->bytes, skb->len);
	if (now - st->last < FLOW_SUMMARY_NS)
		return;
	st->last = now;
	fresh.packets = st->packets;
	fresh.bytes = st->bytes;
	st->packets = 0;
	st->bytes = 0;
	flows_emit(skb, info, FLOW_SUMMARY, dir, REASON_FORWARDED, 0, &fresh, NULL);
}

/*
 * flows_reported_dir: packets leaving or entering a pod; from the uplink or
 * the overlay only those BPF forwards to a local pod (the rest is the node's
 * own traffic, or passes to the stack and is reported by to_pod).
 */
static __always_inline int flows_reported_dir(const struct ipv4_info *info, __u8 dir, __u8 reason)
{
	if (dir == DIR_FROM_POD || dir == DIR_TO_POD)
		return 1;
	if (dir == DIR_TO_NETDEV || reason != REASON_FORWARDED)
		return 0;
	return bpf_map_lookup_elem(&myelin_endpoints, &info->daddr) != NULL;
}

/*
 * flows_forward reports a forwarded or passed packet as the rules above say.
 * A BPF-to-BPF call, not inlined: the verdict helpers are inlined at every
 * exit of every program, and one copy of this keeps them small and within
 * the stack limit.
 */
static __noinline void flows_forward(struct __sk_buff *skb, const struct ipv4_info *info, __u8 dir,
				     __u8 reason)
{
	struct l4_head tcp;

	if (!info->l4_off) /* not IPv4, or a later fragment */
		return;
	if (info->proto == IPPROTO_TCP) {
		/* Flags and ports in one read, from the linear data when they lie there. */
		if (l4_load_head(skb, info, &tcp, L4_TCP_HEAD_LOAD) < 0)
			return;
		if (!(tcp.flags & FLOW_TCP_REPORTED) || !flows_reported_dir(info, dir, reason))
			return;
		flows_emit(skb, info, FLOW_TCP, dir, reason, tcp.flags, NULL, &tcp);
		return;
	}
	if (!flows_reported_dir(info, dir, reason))
		return;
	if (info->proto == IPPROTO_UDP && flows_is_dns(skb, info)) {
		flows_dns(skb, info, dir);
		return;
	}
	flows_aggregate(skb, info, dir);
}

/* flows_drop reports a dropped packet (not inlined, as flows_forward). */
static __noinline void flows_drop(struct __sk_buff *skb, const struct ipv4_info *info, __u8 dir,
				  __u8 reason)
{
	struct l4_head tcp;

	if (!flows_allow(skb, info, FLOW_DROP, dir, reason, FLOW_DROP_BUDGET))
		return;
	/* A TCP header cut short: no flags, and flows_fill reads what ports it can. */
	if (info->l4_off && info->proto == IPPROTO_TCP &&
	    l4_load_head(skb, info, &tcp, L4_TCP_HEAD_LOAD) == 0) {
		flows_emit(skb, info, FLOW_DROP, dir, reason, tcp.flags, NULL, &tcp);
		return;
	}
	flows_emit(skb, info, FLOW_DROP, dir, reason, 0, NULL, NULL);
}

#endif /* MYELIN_LIB_FLOWS_H */
