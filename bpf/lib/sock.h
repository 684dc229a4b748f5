/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket-level load balancing (bpf-lb-sock, bpf/sock.c): the frontend a
 * socket was translated from, so that what the application sees of its
 * peer (getpeername, recvfrom's source address) stays the Service's
 * address. A connected socket keeps it in its own storage
 * (myelin_lb_sock_peer: no hashing, freed with the socket); the datagrams
 * of an unconnected UDP socket, each to any frontend, in the LRU map
 * myelin_lb_sock_rev. The socket programs' object writes both; the tc
 * datapath's reads them to name the Service in flow records
 * (lib/flows.h), sharing the pins when socket-LB is configured
 * (Config.SocketLB).
 */
#ifndef MYELIN_LIB_SOCK_H
#define MYELIN_LIB_SOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define LB_SOCK_REV_MAX 262144 /* (socket, backend) pairs a frontend was translated to */

/* lb_sock_rev_key is a socket (its cookie) and the backend it was sent to. */
struct lb_sock_rev_key {
	__u64 cookie;
	__u32 addr; /* backend, network order */
	__u16 port; /* network order */
	__u16 pad;  /* explicit padding, 0 */
};

/* lb_sock_rev is the frontend a socket addressed, before translation. */
struct lb_sock_rev {
	__u32 addr; /* network order */
	__u16 port; /* network order */
	__u16 pad;  /* explicit padding, 0 */
};

/*
 * myelin_lb_sock_rev: (socket cookie, backend) -> frontend, for the
 * datagrams of unconnected UDP sockets (sendmsg4). LRU: a closed socket's
 * entries age out by themselves; an entry lost to eviction only shows the
 * backend's address to recvfrom.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb_sock_rev_key);
	__type(value, struct lb_sock_rev);
	__uint(max_entries, LB_SOCK_REV_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_sock_rev SEC(".maps");

/* lb_sock_peer is what connect4 translated a socket to, and from. */
struct lb_sock_peer {
	struct lb_sock_rev frontend;
	__u32 backend_addr; /* network order */
	__u16 backend_port; /* network order */
	__u16 pad;	    /* explicit padding, 0 */
};

/*
 * myelin_lb_sock_peer: the socket storage of a socket connect4 translated
 * (TCP, connected UDP). Allocated at connect() and freed with the socket:
 * reading it is a pointer walk from the socket, where the LRU map costs a
 * hash and an insert per connection. A failed allocation only shows the
 * backend's address to getpeername/recvfrom. The agent writes nothing here.
 */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lb_sock_peer);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_sock_peer SEC(".maps");

/*
 * lb_sock_frontend is the frontend socket sk was translated from to backend
 * addr:port (network order): from its storage if connect4 translated it,
 * else, for a datagram (which may answer one sendmsg4 translated), from
 * myelin_lb_sock_rev by the socket's cookie (ctx: the program's context).
 * NULL if there is none. A UDP socket's storage holds only while it is
 * connected: one disconnected (connect with AF_UNSPEC, which runs no
 * connect4) keeps it, and its datagrams from that backend are no answers
 * to the Service.
 */
static __always_inline const struct lb_sock_rev *
lb_sock_frontend(void *ctx, struct bpf_sock *sk, __u32 addr, __u16 port, int datagram)
{
	struct lb_sock_rev_key k = {};
	const struct lb_sock_peer *p;

	p = bpf_sk_storage_get(&myelin_lb_sock_peer, sk, 0, 0);
	if (p && p->backend_addr == addr && p->backend_port == port &&
	    (!datagram || sk->state == BPF_TCP_ESTABLISHED))
		return &p->frontend;
	if (!datagram)
		return NULL;
	k.cookie = bpf_get_socket_cookie(ctx);
	k.addr = addr;
	k.port = port;
	return bpf_map_lookup_elem(&myelin_lb_sock_rev, &k);
}

#endif /* MYELIN_LIB_SOCK_H */
