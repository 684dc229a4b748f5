/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket-level load balancing (bpf-lb-sock, bpf/sock.c): the frontend a
 * socket was translated from, so that what the application sees of its
 * peer (getpeername, recvfrom's source address) stays the Service's
 * address. The socket programs' object writes the map; the tc datapath's
 * reads it to name the Service in flow records (lib/flows.h), sharing the
 * pin when socket-LB is configured (Config.SocketLB).
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
 * myelin_lb_sock_rev: (socket cookie, backend) -> frontend. LRU: a closed
 * socket's entries age out by themselves; an entry lost to eviction only
 * shows the backend's address to getpeername/recvfrom.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb_sock_rev_key);
	__type(value, struct lb_sock_rev);
	__uint(max_entries, LB_SOCK_REV_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_sock_rev SEC(".maps");

#endif /* MYELIN_LIB_SOCK_H */
