/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The NetworkPolicy types shared with the agent (lib/types.h says how):
 * isolation flags, allow entries, the ipcache, and the connection table's
 * slots and buckets. Included by lib/types.h only.
 */
#ifndef MYELIN_LIB_TYPES_POLICY_H
#define MYELIN_LIB_TYPES_POLICY_H

#include <linux/types.h>

/*
 * NetworkPolicy (lib/policy.h, docs/policy.md). policy_ep is the value of
 * myelin_policy_eps (key: local pod IPv4, network order): which directions
 * of the pod are isolated, and which could not be written in full.
 */
enum policy_flags {
	POLICY_F_INGRESS = 1, /* ingress isolated: only allowed peers get in */
	POLICY_F_EGRESS = 2,  /* egress isolated: only allowed peers are reached */
	POLICY_F_INGRESS_INCOMPLETE =
		4, /* some ingress allows are missing: misses are DROP_POLICY_MAP_FULL */
	POLICY_F_EGRESS_INCOMPLETE = 8, /* the same for egress */
};

/* policy_dir is the direction of a policy entry or tracked tuple, seen from the local pod. */
enum policy_dir {
	POLICY_DIR_INGRESS = 0,
	POLICY_DIR_EGRESS = 1,
};

struct policy_ep {
	__u8 flags; /* enum policy_flags */
	__u8 pad[3];
};

/* policy_key: what a local pod allows from or to one peer identity (0: any peer). */
struct policy_key {
	__u32 ep_addr;	/* the local pod's IPv4, network order */
	__u32 identity; /* the peer's identity (myelin_ipcache), 0 = any peer */
	__u8 dir;	/* enum policy_dir */
	__u8 pad[3];
};

#define POLICY_PORTS_MAX 16

/*
 * policy_port is one allowed range: proto 0 allows every protocol and port;
 * lo 0 takes in the port-less later fragments of an all-ports rule.
 */
struct policy_port {
	__u8 proto; /* IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP, or 0 = anything */
	__u8 pad;
	__u16 lo; /* host order, inclusive */
	__u16 hi;
};

struct policy_value {
	__u8 count; /* used entries of ports */
	__u8 pad[3];
	struct policy_port ports[POLICY_PORTS_MAX];
};

/* ipcache_key is the key of myelin_ipcache: a pod /32 or a policy CIDR. */
struct ipcache_key {
	__u32 prefixlen;
	__u32 addr; /* network order */
};

struct ipcache_value {
	__u32 identity;
};

/*
 * policy_ct_key is one connection isolated pods of this node accepted, one
 * entry for both its directions and both its ends: the tuple with the lower
 * (address, port) end first (addresses and ports network order; 0 ports for
 * protocols without them).
 */
struct policy_ct_key {
	__u32 addr_lo;
	__u32 addr_hi;
	__u16 port_lo;
	__u16 port_hi;
	__u8 proto;
	__u8 pad[3];
};

/*
 * policy_ct_ends are the ends of a tracked connection whose check accepted it,
 * and which end opened it: sent the packet whose check wrote the entry (a
 * SYN, a first datagram), when its source was checked. The opener is what
 * the agent counts the entry against (policy-ct-pod-max,
 * datapath.GCPolicyCT); entries written before 2026-12-05 name none. OUT
 * and IN say which check of an end set its bit: its egress check (the end
 * sent the packet it accepted) or its ingress check. When a policy change
 * would forget the end, the agent judges it again in that direction only, as
 * a connection the end opens or one its peer opens
 * (datapath.PolicyCTPurge.Allowed). Each write of an end's bit sets one and
 * clears the other; an end with neither (written by older programs) is
 * forgotten without a judgement.
 */
enum policy_ct_ends {
	POLICY_CT_END_LO = 1,	 /* the local pod at addr_lo/port_lo */
	POLICY_CT_END_HI = 2,	 /* the local pod at addr_hi/port_hi */
	POLICY_CT_OPENED_LO = 4, /* addr_lo opened it */
	POLICY_CT_OPENED_HI = 8, /* addr_hi opened it */
	/* 16 and 32 meant other things in two builds of 2026-12-06: not reused */
	POLICY_CT_OUT_LO = 64,	/* END_LO was set by addr_lo's egress check */
	POLICY_CT_OUT_HI = 128, /* END_HI was set by addr_hi's egress check */
	POLICY_CT_IN_LO = 256,	/* END_LO was set by addr_lo's ingress check */
	POLICY_CT_IN_HI = 512,	/* END_HI was set by addr_hi's ingress check */
	/* The peer is this node's host stack, let in as the node's own traffic
	 * (lib/policy.h): only what the host sends passes on its behalf. */
	POLICY_CT_HOST_PEER = 1024,
};

/*
 * policy_ct_closing is how far a tracked TCP connection has closed: which
 * end sent its FIN, and which FIN the other end acknowledged. When both
 * are, the entry is deleted (lib/policy_ct.h), so closed connections free
 * their entries instead of waiting for the LRU to evict them. An RST marks
 * the entry reset; the agent deletes one still marked after a grace period
 * (datapath.GCPolicyCT), and the connection's next other segment unmarks
 * it (an RST the receiver ignored, outside its window, must not end the
 * tracking).
 */
enum policy_ct_closing {
	POLICY_CT_FIN_LO = 1,	/* the lo end sent its FIN (fin_lo) */
	POLICY_CT_FIN_HI = 2,	/* the hi end sent its FIN (fin_hi) */
	POLICY_CT_ACKED_LO = 4, /* the hi end acknowledged the lo end's FIN */
	POLICY_CT_ACKED_HI = 8, /* the lo end acknowledged the hi end's FIN */
	POLICY_CT_RESET = 16,	/* an RST was seen, and no other segment since */
};

/*
 * policy_ct_entry: a TCP connection's fin_lo and fin_hi follow its close;
 * a connection of another protocol, which has no close to follow, keeps in
 * fin_lo when it was last seen (policy_ct_now), and the agent deletes it
 * once idle past its timeout (datapath.GCPolicyCT).
 */
struct policy_ct_entry {
	__u32 ends;    /* enum policy_ct_ends */
	__u32 closing; /* enum policy_ct_closing */
	__u32 fin_lo;  /* TCP: the acknowledgment number that covers the lo end's FIN (host
			* order); other protocols: last seen (policy_ct_now) */
	__u32 fin_hi;  /* TCP: the same for the hi end's FIN */
};

/*
 * enum policy_ct_ref: the bits of a slot's ref. A lookup that finds the slot
 * sets IN_USE and SEEN (policy_ct_find_at); a write of the slot under its
 * count (policy_ct_write) clears them all. IN_USE: a tracked packet passed
 * since the bucket last made room (policy_ct_put clears it when it replaces a
 * slot in use). SEEN: one passed since the agent's last GC round, which
 * clears it, sets ROUND (the connection carried traffic after its write) and
 * moves born on to that round's time (datapath.GCPolicyCT, which deletes a
 * TCP entry idle past its timeout). RESET: the agent's last GC round found
 * the entry marked reset (enum policy_ct_closing); a round that finds it
 * still marked a grace period later deletes it. Only the agent sets and
 * clears it (the programs change the other bits atomically), in the table,
 * so a restarted agent goes on where the last one stopped.
 */
enum policy_ct_ref {
	POLICY_CT_REF_IN_USE = 1,
	POLICY_CT_REF_SEEN = 2,
	POLICY_CT_REF_ROUND = 4,
	POLICY_CT_REF_RESET = 8,
};

/*
 * policy_ct_slot is one way of a myelin_policy_ct bucket (lib/policy_ct_table.h):
 * a connection's key and entry, empty while the key is zero (a real key has
 * a protocol). seq is the slot's sequence count: odd while a writer is at
 * it, and every write moves it on, so a reader that saw the same even count
 * before and after its copy has a whole slot. born (policy_ct_now when the
 * key was written, moved on by the agent's GC rounds that found it seen) and
 * ref (enum policy_ct_ref) say which slot of its full buckets a new
 * connection replaces, and when the agent deletes an idle one.
 */
struct policy_ct_slot {
	struct policy_ct_key key;
	struct policy_ct_entry entry;
	__u32 seq;
	__u32 born;
	__u32 ref;
};

/* POLICY_CT_WAYS: the slots of a myelin_policy_ct bucket. */
#define POLICY_CT_WAYS 4

/* policy_ct_bucket is one element of myelin_policy_ct: the slots of the
 * connections whose keys hash to it (lib/policy_ct_table.h). */
struct policy_ct_bucket {
	struct policy_ct_slot way[POLICY_CT_WAYS];
};

/*
 * policy_ct_stat indexes myelin_policy_ct_stats, per-CPU counts of the
 * connections a new one pushed out of its full buckets (policy_ct_put).
 */
enum policy_ct_stat {
	POLICY_CT_STAT_EVICTED_IDLE = 0,   /* no packet since its buckets last made room */
	POLICY_CT_STAT_EVICTED_IN_USE = 1, /* all 8 slots had seen one: a live connection */
	POLICY_CT_STAT_MAX = 2,
};

#endif /* MYELIN_LIB_TYPES_POLICY_H */
