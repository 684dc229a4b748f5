/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Types shared with the agent. internal/datapath generates their Go mirrors
 * from this object's BTF (bpf2go -type), so they are never copied by hand.
 * Keep padding explicit: the Go side sees exactly these bytes.
 */
#ifndef MYELIN_LIB_TYPES_H
#define MYELIN_LIB_TYPES_H

#include <linux/types.h>

/* endpoint_info describes one pod on this node; key: pod IPv4, network order. */
struct endpoint_info {
	__u32 ifindex;	   /* host-side veth, the peer of the pod's eth0 */
	__u32 flags;	   /* enum policy_flags, mirrored from myelin_policy_eps by the agent */
	__u8 pod_mac[6];   /* MAC of eth0 inside the pod */
	__u8 host_mac[6];  /* MAC of the host-side veth */
	__u16 endpoint_id; /* agent-assigned endpoint id */
	__u16 pad;	   /* explicit padding, 0 */
};

/*
 * tunnel_lpm_key is the key of myelin_tunnel: a node's PodCIDR. Not named
 * tunnel_key, which would read like the kernel's struct bpf_tunnel_key.
 */
struct tunnel_lpm_key {
	__u32 prefixlen; /* bits of addr that match, 0..32 */
	__u32 addr;	 /* network order */
};

/* budget_table indexes myelin_budgets: one per table with a per-pod budget. */
enum budget_table {
	BUDGET_POLICY_CT = 0, /* myelin_policy_ct (policy-ct-pod-max) */
	BUDGET_NAT = 1,	      /* myelin_snat (nat-pod-max) */
	BUDGET_LB_CT = 2,     /* myelin_lb_ct (lb-ct-pod-max) */
	BUDGET_TABLES = 3,
};

/* budget_state is one table's entry of myelin_budgets. */
struct budget_state {
	__u32 any_over; /* 1: the table's over list holds a pod */
	__u32 max;	/* the budget (entries or flows per pod), 0 none */
};

/* tunnel_endpoint is where a PodCIDR's pods are: the VXLAN peer to send them to. */
struct tunnel_endpoint {
	__u32 node_ip; /* underlay IPv4 of the node, network order */
};

/*
 * nat_key is one direction of a masqueraded flow in myelin_snat, written as
 * the packets of that direction carry it (addresses and ports network order):
 * NAT_DIR_EGRESS is the pod's original tuple (pod -> world), NAT_DIR_INGRESS
 * the reply's tuple after translation (world -> node IP). ICMP echo has no
 * ports: a request's id sits in sport, a reply's in dport, the other is 0.
 */
struct nat_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto; /* IPPROTO_TCP, IPPROTO_UDP or IPPROTO_ICMP */
	__u8 dir;   /* enum nat_dir */
	__u16 pad;  /* explicit padding, 0 */
};

/*
 * nat_entry is what a nat_key translates to: for NAT_DIR_EGRESS the new
 * source (node IP, NAT port), for NAT_DIR_INGRESS the original destination
 * (pod IP and port). The agent's GC reads last_seen and flags of both
 * directions of a flow together.
 */
struct nat_entry {
	__u64 last_seen; /* clock_coarse_ns of a recent packet, refreshed at most once a second */
	__u32 addr;	 /* network order */
	__u16 port;	 /* network order; the ICMP echo id for ICMP */
	__u16 flags;	 /* enum nat_flags */
};

/* nat_dir is the direction of a nat_key. */
enum nat_dir {
	NAT_DIR_EGRESS = 0,  /* pod -> world, before translation */
	NAT_DIR_INGRESS = 1, /* world -> node IP, before reverse translation */
};

/* nat_flags is the connection state the GC picks a timeout by. */
enum nat_flags {
	NAT_F_REPLIED = 1, /* a reply came back (TCP: past the handshake) */
	NAT_F_CLOSING = 2, /* TCP FIN or RST seen in either direction */
};

/*
 * np_entry is a value of the NodePort SNAT tables myelin_nodeport_syn,
 * myelin_nodeport_nat and myelin_nodeport_udp (NodePort flows to a backend
 * on another node), keyed by nat_key: NAT_DIR_EGRESS is the client's tuple
 * to node IP:nodePort, NAT_DIR_INGRESS the backend's reply to node IP:NAT
 * port.
 */
struct np_entry {
	__u64 last_seen;  /* clock_coarse_ns, refreshed at most once a second */
	__u32 addr;	  /* egress: the backend; ingress: the client (network order) */
	__u32 backend_id; /* egress: the backend's id */
	/* TCP egress, host order: the client's SYN sequence number + 1 until
	 * the backend's SYN-ACK to it, then that SYN-ACK's + 1 (0: no SYN
	 * created the flow); ingress: unused (0; before 2026-12-08 the client's) */
	__u32 reply_seq;
	__u16 port;   /* egress: the backend port; ingress: the client port */
	__u16 xport;  /* egress: the NAT port; ingress: the NodePort (network order) */
	__u16 flags;  /* enum nat_flags */
	__u16 pad[3]; /* explicit padding, 0 */
};

/* np_stat indexes myelin_nodeport_stats, per-CPU counters of the NodePort SNAT tables. */
enum np_stat {
	NP_STAT_SYN_CREATED = 0, /* flows created in myelin_nodeport_syn */
	NP_STAT_PROMOTED = 1,	 /* TCP flows moved to myelin_nodeport_nat (handshake completed) */
	NP_STAT_REPLY_LOST =
		2, /* a pod's reply to a NAT port of no flow: its embryonic flow was evicted */
	NP_STAT_UDP_ANSWERED = 3, /* UDP flows moved to myelin_nodeport_udp (answered) */
	NP_STAT_MAX = 4,
};

/* nomasq_key is the key of myelin_nomasq: a destination prefix never masqueraded. */
struct nomasq_key {
	__u32 prefixlen; /* bits of addr that match, 0..32 */
	__u32 addr;	 /* network order */
};

/*
 * lb_svc_key is a service frontend in myelin_lb_services: a ClusterIP and
 * port, or this node's IP and a NodePort (network order).
 */
struct lb_svc_key {
	__u32 addr;
	__u16 port;
	__u8 proto; /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;   /* explicit padding, 0 */
};

/* lb_svc_flags are the bits of lb_svc.flags; all but MAGLEV are datapath.ServiceFlags. */
enum lb_svc_flags {
	LB_SVC_F_NODEPORT = 1,	   /* frontend is node_ip:nodePort, served on the uplink */
	LB_SVC_F_AFFINITY = 2,	   /* sessionAffinity ClientIP (myelin_lb_affinity) */
	LB_SVC_F_MAGLEV = 4,	   /* the service has a table in myelin_lb_maglev */
	LB_SVC_F_EXT_LOCAL = 8,	   /* externalTrafficPolicy Local: see lb_svc.local_count */
	LB_SVC_F_EXTERNAL_IP = 16, /* frontend is one of spec.externalIPs (bpf/sock.c) */
};

/*
 * lb_svc is a service: its backends are slots 0..count-1 of myelin_lb_slots
 * under id (and, with LB_SVC_F_MAGLEV, the Maglev table under id). With
 * LB_SVC_F_EXT_LOCAL, clients from outside the node choose among the first
 * local_count slots only, the node's own backends, and the Maglev table
 * holds those (lib/lb.h, enum lb_client).
 */
struct lb_svc {
	__u32 id;		/* agent-assigned, >= 1 */
	__u32 count;		/* ready backends; 0 = reject new connections */
	__u32 affinity_timeout; /* seconds, with LB_SVC_F_AFFINITY */
	__u8 flags;		/* enum lb_svc_flags */
	__u8 pad;		/* explicit padding, 0 */
	__u16 local_count;	/* with LB_SVC_F_EXT_LOCAL: slots 0..local_count-1 are local */
};

/* lb_slot_key is one backend slot of a service in myelin_lb_slots. */
struct lb_slot_key {
	__u32 svc_id;
	__u32 slot; /* 0..count-1 */
};

/* lb_backend is a backend (myelin_lb_backends, key: backend id): pod IP and targetPort. */
struct lb_backend {
	__u32 addr; /* network order */
	__u16 port; /* network order */
	__u16 pad;  /* explicit padding, 0 */
};

/* lb_affinity_key is a client of a service with ClientIP session affinity. */
struct lb_affinity_key {
	__u32 svc_id;
	__u32 client; /* network order */
};

/*
 * lb_affinity is the backend a client sticks to. index is where the choice
 * was found (the slot, or the Maglev table entry): the backend is still the
 * service's, and ready, while that place still holds backend_id.
 */
struct lb_affinity {
	__u64 last_used; /* clock_coarse_ns of the client's last new connection */
	__u32 backend_id;
	__u32 index;
};

/*
 * ct_key is one direction of a load-balanced flow in myelin_lb_ct, written
 * as the packets of that direction carry it (network order): CT_DIR_FORWARD
 * is the client's tuple to the frontend, before translation; CT_DIR_REVERSE
 * the backend's reply as it leaves the backend (to the client, or to the
 * hairpin address).
 */
struct ct_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto; /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 dir;   /* enum ct_dir */
	__u16 pad;  /* explicit padding, 0 */
};

/* ct_dir is the direction of a ct_key. */
enum ct_dir {
	CT_DIR_FORWARD = 0, /* client -> frontend */
	CT_DIR_REVERSE = 1, /* backend -> client */
};

/*
 * ct_flags describe how a reply is translated and sent on (HAIRPIN,
 * NODEPORT) and the state of a TCP flow, which the agent's GC
 * (Datapath.GCServiceCT) picks a timeout by (ESTABLISHED, CLOSING).
 */
enum ct_flags {
	CT_F_HAIRPIN =
		1, /* the client is its own backend: the reply's destination is restored too */
	CT_F_NODEPORT = 2,    /* NodePort client: the reply leaves through the FIB (or tunnel) */
	CT_F_ESTABLISHED = 4, /* forward: a TCP segment other than SYN, FIN, RST followed the SYN */
	CT_F_CLOSING = 8,     /* TCP FIN or RST seen in this entry's direction */
	/* Reverse, TCP, NodePort: set when the flow is created, cleared by the
	 * backend's first segment that shows a completed handshake (data, or an ACK
	 * of client data past its SYN: ct_backend_answered), or when the client's
	 * ACK of the backend's SYN-ACK moves the flow out of the LRU
	 * (nodeport_ct.h). Until then the GC keeps the SYN timeout, however the
	 * client's segments look: a blind client (a forged source) can make its
	 * own segments look established, and a half-open backend's ACK of them,
	 * never that. */
	CT_F_AWAITING_REPLY = 16,
};

/*
 * ct_entry is what a ct_key maps to: for CT_DIR_FORWARD the backend,
 * for CT_DIR_REVERSE the frontend the reply's source becomes and, with
 * CT_F_HAIRPIN, the client its destination becomes. A forward entry names
 * its backend twice: by id, and by address and port (its identity), so a
 * flow whose backend id was deleted or now names another backend chooses
 * again instead of following the id (lib/lb_flow.h, lb_flow_keep).
 */
struct ct_entry {
	/* forward: the backend; reverse, CT_F_AWAITING_REPLY (NodePort, in the
	 * LRU): the backend's SYN-ACK sequence number + 1 (host order), 0 until
	 * seen (nodeport_ct.h) */
	__u32 backend_id;
	__u32 front_addr;  /* reverse: frontend address, network order */
	__u32 client_addr; /* reverse: the client, network order */
	__u16 front_port;  /* reverse: frontend port, network order */
	__u16 flags;	   /* enum ct_flags */
	__u64 last_seen;   /* clock_coarse_ns of a recent packet, refreshed at most once a second */
	__u32 svc_id;	   /* forward: the service (lb_svc.id) the backend was chosen for */
	__u32 be_addr;	   /* forward: the backend's address, network order */
	__u16 be_port;	   /* forward: the backend's port, network order */
	__u16 pad;	   /* explicit padding, 0 */
	/* forward: where the backend was found (slot or Maglev entry); reverse,
	 * CT_F_AWAITING_REPLY: the client's ISN + 1 (host order) */
	__u32 index;
};

/*
 * frag_key is a fragmented datagram at one translation stage in
 * myelin_frags, with the addresses its fragments arrive with (network
 * order): source, destination, protocol and IPv4 id are what the receiver
 * reassembles by, so they name one datagram.
 */
struct frag_key {
	__u32 saddr;
	__u32 daddr;
	__u16 id;
	__u8 proto;
	__u8 stage; /* enum frag_stage */
};

/*
 * frag_entry is what the stage made of the datagram's first fragment: its
 * new addresses (network order) and how it went on. Later fragments carry
 * no ports; they get the same addresses (lib/frag.h).
 */
struct frag_entry {
	__u32 saddr;
	__u32 daddr;
	__u8 route;  /* enum lb_route of lib/service.h */
	__u8 host;   /* policy stages: the host's own stack sent the first fragment */
	__u8 pad[2]; /* explicit padding, 0 */
};

/* frag_stage is where a datagram was translated, or which policy check passed it. */
enum frag_stage {
	FRAG_STAGE_FROM_POD = 0,       /* lb_from_pod: service DNAT, hairpin, NodePort replies */
	FRAG_STAGE_FROM_NETDEV = 1,    /* masq_ingress and lb_from_netdev: replies, NodePort */
	FRAG_STAGE_TO_NETDEV = 2,      /* masq_egress: masquerade */
	FRAG_STAGE_TO_POD = 3,	       /* ct_reply_to_pod: replies entering a service client */
	FRAG_STAGE_POLICY_EGRESS = 4,  /* policy_egress passed the first fragment (frag_mark) */
	FRAG_STAGE_POLICY_INGRESS = 5, /* policy_ingress passed the first fragment */
};

/*
 * icmp_rate is the per-CPU token bucket of the ICMP port unreachable
 * answers (myelin_icmp_rate, lib/icmp.h).
 */
struct icmp_rate {
	__u64 last_ns;	  /* bpf_ktime_get_ns up to which tokens were added */
	__u64 tokens;	  /* answers left */
	__u64 suppressed; /* rejects left unanswered: over the rate */
};

/* metrics_value is one per-CPU counter row of myelin_metrics. */
struct metrics_value {
	__u64 packets;
	__u64 bytes;
};

/* event_type is the kind of a ring buffer event. */
enum event_type {
	EVENT_DROP = 1,	 /* packet dropped; only when drop_events_enabled */
	EVENT_TRACE = 2, /* packet forwarded or passed; only when trace_enabled */
};

/* event is one ring buffer record; addresses and ports in network order. */
struct event {
	__u8 type;     /* enum event_type */
	__u8 reason;   /* enum reason */
	__u8 dir;      /* enum direction */
	__u8 proto;    /* IPv4 protocol, 0 when not IPv4 */
	__u32 ifindex; /* device the program runs on */
	__u32 saddr;
	__u32 daddr;
	__u16 sport; /* 0 unless TCP/UDP and not a later fragment */
	__u16 dport;
	__u32 len; /* skb->len, L2 header included */
};

#include "types_policy.h"

/*
 * Flow records (lib/flows.h, docs/observability.md): what leaves the kernel
 * through myelin_flows (drops: myelin_flow_drops) for the agent's flow
 * store. Addresses and ports in network order.
 */
enum flow_kind {
	FLOW_TCP = 1, /* a TCP packet with SYN, FIN or RST: a new connection or a state change */
	FLOW_NEW = 2, /* the first packet of a UDP/ICMP/other flow */
	FLOW_SUMMARY = 3, /* a UDP/ICMP/other flow's packets and bytes since its last record */
	FLOW_DROP = 4,	  /* a dropped packet, with its reason */
	FLOW_DNS = 5,	  /* a UDP/53 packet; struct flow_dns_record carries its payload */
};

#define FLOW_DNS_CAPTURE 256 /* bytes of a UDP/53 payload a DNS record carries */

struct flow_record {
	__u64 ktime;   /* bpf_ktime_get_ns() */
	__u64 packets; /* FLOW_SUMMARY: packets and bytes since the flow's last record */
	__u64 bytes;
	__u32 saddr;
	__u32 daddr;
	__u32 svc_addr; /* the Service frontend it was addressed to (translated), else 0 */
	__u32 ifindex;
	__u32 len;   /* skb->len */
	__u16 sport; /* ICMP: type and code */
	__u16 dport;
	__u16 svc_port;
	__u16 payload_len; /* FLOW_DNS: bytes of payload that follow */
	__u8 kind;	   /* enum flow_kind */
	__u8 reason;	   /* enum reason */
	__u8 dir;	   /* enum direction */
	__u8 proto;
	__u8 tcp_flags; /* the TCP header's flags byte */
	__u8 pad[3];
};

struct flow_dns_record {
	struct flow_record hdr;
	__u8 payload[FLOW_DNS_CAPTURE];
};

/* flow_key is a UDP/ICMP/other flow as one program saw it (myelin_flow_state). */
struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 dir;
	__u8 pad[2];
};

/*
 * flow_limit_key is one record budget of myelin_flow_limit (lib/flows.h,
 * flows_allow): a kind of record (FLOW_DNS, FLOW_DROP with its reason) in one
 * program direction on one device; addr is 0 on a pod's veth (the pod is the
 * device), else the local pod a forwarded packet is delivered to.
 */
struct flow_limit_key {
	__u32 ifindex;
	__u32 addr;
	__u8 kind;
	__u8 reason;
	__u8 dir;
	__u8 pad;
};

/* flow_limit is a budget's current window (clock_coarse_ns >> FLOW_LIMIT_WINDOW_SHIFT) and its
 * records. */
struct flow_limit {
	__u64 window;
	__u64 records;
};

/* flow_state is what a flow accumulated since its last record. */
struct flow_state {
	__u64 last; /* clock_coarse_ns of its last record */
	__u64 packets;
	__u64 bytes;
};

#endif /* MYELIN_LIB_TYPES_H */
