/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A load-balanced flow's backend and its Service conntrack entries (ct.h):
 * the backend a packet's flow keeps while its entry allows (lb_flow_keep),
 * else a new choice (lb_select), and the entries written or touched for it
 * (lb_flow_commit). Pods' flows (service.h) and NodePort flows to local
 * backends (nodeport_ct.h) share it, each with its own tables.
 */
#ifndef MYELIN_LIB_LB_FLOW_H
#define MYELIN_LIB_LB_FLOW_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "ct.h"
#include "l4.h"
#include "lb.h"

/* lb_flow is where a packet of a load-balanced flow goes. */
struct lb_flow {
	struct lb_backend be;
	struct ct_entry *ct; /* the flow's forward entry when it is kept, else NULL */
	__u32 id;	     /* backend id */
	__u32 index;	     /* where the backend was found in the service's pool */
};

/*
 * lb_flow_keep returns the backend of the flow of forward entry ct to svc
 * while the flow may keep it, else NULL (choose again): the entry was made
 * for this service (a frontend now owned by another Service has another
 * id, and ids are not reused while entries may name them), its backend id
 * still names the address and port the flow was sent to (a deleted or
 * reused id does not), and the packet does not open a new connection. A
 * TCP SYN does, unless it repeats the SYN of a handshake still open whose
 * backend is still in the service's pool at the same place (one more
 * lookup, for SYNs only): a new connection always gets a current backend
 * of this service, never a terminating one.
 */
static __always_inline const struct lb_backend *lb_flow_keep(const struct ct_entry *ct,
							     const struct lb_svc *svc,
							     const struct l4_info *l4,
							     enum lb_client client)
{
	const struct lb_backend *b;

	if (ct->svc_id != svc->id)
		return NULL;
	if (l4->tcp_opening && ((ct->flags & (CT_F_ESTABLISHED | CT_F_CLOSING)) ||
				lb_index_lookup(svc, ct->index, client) != ct->backend_id))
		return NULL;
	b = lb_backend_lookup(ct->backend_id);
	if (!b || b->addr != ct->be_addr || b->port != ct->be_port)
		return NULL;
	return b;
}

/*
 * lb_flow_backend fills f with the backend of flow fwd of client to svc:
 * its forward conntrack entry ct's while lb_flow_keep allows, else a new
 * choice (lb_select), with f->ct NULL: the caller writes the flow's entries.
 * Returns the backend id, 0 if none.
 */
static __always_inline __u32 lb_flow_backend(struct ct_entry *ct, const struct ct_key *fwd,
					     const struct lb_svc *svc, const struct l4_info *l4,
					     struct lb_flow *f, enum lb_client client)
{
	const struct lb_backend *b = ct ? lb_flow_keep(ct, svc, l4, client) : NULL;

	if (b) {
		f->be = *b;
		f->id = ct->backend_id;
		f->index = ct->index;
		/* A repeated SYN writes both entries again, see lb_pod_service. */
		f->ct = l4->tcp_opening ? NULL : ct;
		return f->id;
	}
	f->ct = NULL;
	f->id = lb_select(svc, fwd, &f->index, client);
	b = f->id ? lb_backend_lookup(f->id) : NULL;
	if (!b)
		return 0;
	f->be = *b;
	return f->id;
}

/*
 * lb_flow_commit records the packet of flow fwd going to f: a kept flow is
 * touched (state, last_seen, its reverse entry checked once a second); a
 * new choice writes both entries, in the state "SYN" whatever the packet.
 * Returns 0 or DROP_SVC_CT_FULL.
 */
static __always_inline int lb_flow_commit(void *map, const struct ct_key *fwd,
					  const struct lb_flow *f, const struct lb_svc *svc,
					  const struct l4_info *l4, __u16 flags, __u32 syn_next)
{
	struct ct_entry fv = {
		.backend_id = f->id,
		.flags = flags,
		.last_seen = clock_coarse_ns(),
		.svc_id = svc->id,
		.be_addr = f->be.addr,
		.be_port = f->be.port,
		.index = f->index,
	};

	if (f->ct) {
		ct_touch_forward(map, fwd, f->ct, l4);
		return 0;
	}
	return ct_create(map, fwd, &fv, syn_next);
}

#endif /* MYELIN_LIB_LB_FLOW_H */
