/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket-level load balancing (bpf-lb-sock): cgroup programs that translate
 * a Service frontend to a backend when a socket of the node's cgroup
 * connects (TCP, connected UDP) or sends a datagram to it (unconnected
 * UDP), and translate back what the application reads of its peer
 * (getpeername; the source of received datagrams). The connection then
 * runs between the client and the backend as a direct one would: the tc
 * programs see no Service and keep no conntrack for it. The tc path stays
 * for what sockets of this node don't open: NodePort from outside, other
 * hosts. The service maps are the tc datapath's (pinned by name in the
 * same directory); this is a separate object so a kernel or cgroup setup
 * that can't load or attach it leaves the tc datapath whole.
 *
 * A frontend without a ready backend, or any failure here, leaves a pod's
 * address untouched: the tc path then answers as before (an ICMP reject,
 * ECONNREFUSED). The node's own sockets (host_netns_cookie) have no tc
 * path before the uplink: theirs to a ClusterIP is refused at
 * connect()/sendmsg() (EPERM), or the packet to the Service address would
 * leave the node and hang.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "lib/config.h"
#include "lib/lb.h"
#include "lib/sock.h"

/*
 * host_netns_cookie: the cookie of the node's network namespace (the
 * agent's, set at attach), 0 when unknown (then nothing is refused).
 */
volatile const __u64 host_netns_cookie = 0;

/*
 * sock_backend chooses a backend for ctx's destination if it is a Service
 * frontend of protocol proto; NULL if it is none, is an external IP asked by
 * the node's own socket, or has no ready backend, and then *refuse says the socket must not send
 * there untranslated: a ClusterIP frontend without a backend, asked by the node's own socket.
 */
static __always_inline const struct lb_backend *sock_backend(struct bpf_sock_addr *ctx, __u8 proto,
							     int *refuse)
{
	const struct lb_backend *b;
	__u32 daddr = ctx->user_ip4;
	__u64 netns;
	__u16 dport = (__u16)ctx->user_port;
	const struct lb_svc *svc;
	struct ct_key t = {};
	__u32 id, index = 0;

	if (!lb_enabled || cluster_contains(daddr))
		return NULL;
	svc = lb_svc_lookup(daddr, dport, proto);
	if (!svc)
		return NULL;
	/* The client of ClientIP affinity is the socket's network namespace:
	 * a pod, or the node's own processes. The Maglev hash also takes the
	 * socket (its cookie where the tc path has the source port, unknown
	 * before connect): with the namespace alone, every connection of a
	 * client to a Maglev Service went to one backend. */
	netns = bpf_get_netns_cookie(ctx);
	/* An external IP is a frontend for pods only: the node's own processes
	 * (the kubelet, the runtime pulling images, the agent reaching the
	 * apiserver) reach the real address, whatever address a Service author
	 * names in spec.externalIPs (CVE-2020-8554). */
	if (host_netns_cookie && netns == host_netns_cookie && (svc->flags & LB_SVC_F_EXTERNAL_IP))
		return NULL;
	t.saddr = (__u32)netns;
	t.daddr = daddr;
	t.sport = (__u16)bpf_get_socket_cookie(ctx);
	t.dport = dport;
	t.proto = proto;
	id = lb_select(svc, &t, &index, LB_CLIENT_NODE);
	b = id ? lb_backend_lookup(id) : NULL;
	/* Only a ClusterIP: a NodePort on the node's address gets the stack's
	 * RST (external IPs left above). */
	if (!b && host_netns_cookie && netns == host_netns_cookie &&
	    !(svc->flags & LB_SVC_F_NODEPORT))
		*refuse = 1;
	return b;
}

/*
 * sock_rev_xlate shows the frontend for a backend this socket was
 * translated to (lb_sock_frontend; datagram: ctx is a received datagram).
 */
static __always_inline void sock_rev_xlate(struct bpf_sock_addr *ctx, int datagram)
{
	const struct lb_sock_rev *rv;

	if (!lb_enabled)
		return;
	rv = lb_sock_frontend(ctx, ctx->sk, ctx->user_ip4, (__u16)ctx->user_port, datagram);
	if (!rv)
		return;
	ctx->user_ip4 = rv->addr;
	ctx->user_port = (__u32)rv->port;
}

/* sock_proto is ctx's protocol if socket-LB serves it, else 0. */
static __always_inline __u8 sock_proto(const struct bpf_sock_addr *ctx)
{
	__u32 p = ctx->protocol;

	return p == IPPROTO_TCP || p == IPPROTO_UDP ? (__u8)p : 0;
}

/*
 * connect4 translates a connect() to a frontend (TCP, or UDP) and keeps the
 * frontend in the socket's storage. A socket connected again to anything
 * else (UDP; TCP after a failed connect) forgets its old translation.
 */
SEC("cgroup/connect4")
int myelin_sock_connect4(struct bpf_sock_addr *ctx)
{
	__u8 proto = sock_proto(ctx);
	const struct lb_backend *b;
	struct lb_sock_peer *p;
	int refuse = 0;

	if (!proto)
		return 1;
	b = sock_backend(ctx, proto, &refuse);
	if (!b) {
		bpf_sk_storage_delete(&myelin_lb_sock_peer, ctx->sk);
		return !refuse;
	}
	p = bpf_sk_storage_get(&myelin_lb_sock_peer, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (p) {
		p->frontend.addr = ctx->user_ip4;
		p->frontend.port = (__u16)ctx->user_port;
		p->backend_addr = b->addr;
		p->backend_port = b->port;
	}
	ctx->user_ip4 = b->addr;
	ctx->user_port = (__u32)b->port;
	return 1;
}

/* sendmsg4 translates each datagram an unconnected UDP socket sends to a frontend. */
SEC("cgroup/sendmsg4")
int myelin_sock_sendmsg4(struct bpf_sock_addr *ctx)
{
	struct lb_sock_rev_key rk = {};
	struct lb_sock_rev rv = {};
	const struct lb_sock_rev *cur;
	const struct lb_backend *b;
	int refuse = 0;

	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	b = sock_backend(ctx, IPPROTO_UDP, &refuse);
	if (!b)
		return !refuse;
	rk.cookie = bpf_get_socket_cookie(ctx);
	rk.addr = b->addr;
	rk.port = b->port;
	rv.addr = ctx->user_ip4;
	rv.port = (__u16)ctx->user_port;
	/* LRU: a failed insert only leaves the backend's address visible. A
	 * socket sending to the same frontend again finds its entry (the lookup
	 * marks it used) and writes nothing. */
	cur = bpf_map_lookup_elem(&myelin_lb_sock_rev, &rk);
	if (!cur || cur->addr != rv.addr || cur->port != rv.port)
		bpf_map_update_elem(&myelin_lb_sock_rev, &rk, &rv, BPF_ANY);
	ctx->user_ip4 = b->addr;
	ctx->user_port = (__u32)b->port;
	return 1;
}

SEC("cgroup/recvmsg4")
int myelin_sock_recvmsg4(struct bpf_sock_addr *ctx)
{
	sock_rev_xlate(ctx, 1);
	return 1;
}

SEC("cgroup/getpeername4")
int myelin_sock_getpeername4(struct bpf_sock_addr *ctx)
{
	sock_rev_xlate(ctx, 0);
	return 1;
}

/*
 * Closing UDP sockets to backends that went away, or that left one
 * frontend: an iter/udp program the agent runs in each network namespace
 * (the iterator sees the sockets of the namespace it is opened in) after
 * filling myelin_sock_destroy_targets. Every connected IPv4 UDP socket that
 * socket-LB connected to a target's backend (its storage in
 * myelin_lb_sock_peer names it), from the target's frontend unless that is
 * 0.0.0.0 (any frontend), is closed with bpf_sock_destroy (its next send or
 * receive fails with ECONNABORTED), so a client does not keep sending to a
 * dead backend; one byte of output per socket closed. One run serves every
 * backend removed meanwhile: a run per backend and namespace let anyone who
 * churns Endpoints queue more runs than the agent could make. A sweep
 * (sock_destroy_sweep set at load) turns the map around: it holds every
 * backend still programmed (frontend 0.0.0.0:0), and a socket connected to
 * any other backend is closed; the agent sweeps once after its first Service
 * sync, for closes no queue remembers (still queued when the last agent
 * stopped, past the queue's bound). The kernel
 * types are declared with only the fields used, relocated against the
 * kernel's BTF (CO-RE).
 */
struct sock_common {
	__u32 skc_daddr;
	__u16 skc_dport;
	unsigned short skc_family;
} __attribute__((preserve_access_index));

struct udp_sock;
struct bpf_iter_meta {
	void *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

#define SOCK_AF_INET 2 /* AF_INET, which no UAPI header for BPF defines */

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

/* sock_destroy_sweep: myelin_sock_destroy_targets holds the backends to keep (.rodata). */
volatile const __u8 sock_destroy_sweep = 0;

/*
 * myelin_sock_destroy_targets: the backends whose sockets to close, each with
 * the frontend they were translated from or 0.0.0.0:0 for any (network
 * order; pads 0); in a sweep the backends whose sockets to keep. Not pinned:
 * the agent sizes and fills it for each run.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb_sock_peer);
	__type(value, __u8);
	__uint(max_entries, 1);
} myelin_sock_destroy_targets SEC(".maps");

SEC("iter/udp")
int myelin_sock_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = (struct sock_common *)ctx->udp_sk;
	struct lb_sock_peer k = {};
	const struct lb_sock_peer *p;
	char one = 1;

	if (!sk || sk->skc_family != SOCK_AF_INET)
		return 0;
	/* Only a socket socket-LB connected to the backend it is still connected
	 * to: one a client connected to that address by itself is none of the
	 * Service's business. */
	p = bpf_sk_storage_get(&myelin_lb_sock_peer, sk, 0, 0);
	if (!p || p->backend_addr != sk->skc_daddr || p->backend_port != sk->skc_dport)
		return 0;
	k.backend_addr = p->backend_addr;
	k.backend_port = p->backend_port;
	if (sock_destroy_sweep) {
		if (bpf_map_lookup_elem(&myelin_sock_destroy_targets, &k))
			return 0;
	} else if (!bpf_map_lookup_elem(&myelin_sock_destroy_targets, &k)) {
		k.frontend.addr = p->frontend.addr;
		k.frontend.port = p->frontend.port;
		if (!bpf_map_lookup_elem(&myelin_sock_destroy_targets, &k))
			return 0;
	}
	if (bpf_sock_destroy(sk) == 0)
		bpf_seq_write(ctx->meta->seq, &one, sizeof(one));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
