/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Fragmented datagrams through address translation. Only a datagram's first
 * fragment carries the ports that services and masquerade translate by; the
 * later ones carry none. So each translating stage records, when a first
 * fragment (MF set, offset 0) passes, the addresses it gave it in
 * myelin_frags under the datagram's {source, destination, protocol, IPv4
 * id} as it arrived (frag_note), and gives a later fragment of the same
 * datagram the same addresses (frag_follow). A later fragment carries no L4
 * checksum (it sits in the first fragment, which the translation patched for
 * the whole datagram): only the IPv4 header checksum changes.
 *
 * NetworkPolicy judges by ports too: its checks record under their own
 * stages that they passed a first fragment (frag_mark), and pass its later
 * fragments without judging them again (frag_marked).
 *
 * Whole datagrams pay a test of ipv4_info.frag at each stage, no lookup. A
 * later fragment that overtakes its first fragment finds no entry: a
 * translating stage lets it go on as it came (the receiver cannot reassemble
 * it with the translated first fragment, so the datagram is lost, as it
 * would be without translation); a policy check judges it without ports.
 */
#ifndef MYELIN_LIB_FRAG_H
#define MYELIN_LIB_FRAG_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

#include "ipv4.h"
#include "l4.h"
#include "maps.h"
#include "reasons.h"

/* frag_key_of fills key with the packet's datagram from saddr to daddr at stage. */
static __always_inline int frag_key_of(struct __sk_buff *skb, __be32 saddr, __be32 daddr,
				       __u8 proto, __u8 stage, struct frag_key *key)
{
	__be16 id;

	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, id), &id, sizeof(id)) < 0)
		return -1;
	key->saddr = saddr;
	key->daddr = daddr;
	key->id = id;
	key->proto = proto;
	key->stage = stage;
	return 0;
}

/* frag_lookup is what stage recorded for the first fragment of later fragment info. */
static __always_inline const struct frag_entry *
frag_lookup(struct __sk_buff *skb, const struct ipv4_info *info, __u8 stage)
{
	struct frag_key key = {};

	if (frag_key_of(skb, info->saddr, info->daddr, info->proto, stage, &key) < 0)
		return NULL;
	return bpf_map_lookup_elem(&myelin_frags, &key);
}

/*
 * frag_follow gives a later fragment the addresses its datagram's first
 * fragment got at stage, and *route how that went on. Returns 0 with *hit
 * set when it did (info follows), 0 with the packet untouched when no first
 * fragment was recorded, or DROP_INVALID_PACKET when a rewrite failed.
 */
static __always_inline int frag_follow(struct __sk_buff *skb, struct ipv4_info *info, __u8 stage,
				       int *route, int *hit)
{
	struct l4_info none = {}; /* no pseudo header: only the IPv4 checksum changes */
	const struct frag_entry *e = frag_lookup(skb, info, stage);
	__be32 saddr, daddr;

	if (!e)
		return 0;
	saddr = e->saddr;
	daddr = e->daddr;
	*route = e->route;
	*hit = 1;
	if (saddr != info->saddr &&
	    l4_rewrite_addr(skb, &none, IPV4_SADDR_OFF, info->saddr, saddr) < 0)
		return DROP_INVALID_PACKET;
	if (daddr != info->daddr &&
	    l4_rewrite_addr(skb, &none, IPV4_DADDR_OFF, info->daddr, daddr) < 0)
		return DROP_INVALID_PACKET;
	info->saddr = saddr;
	info->daddr = daddr;
	return 0;
}

/*
 * frag_record keeps e for the later fragments of first fragment info, under
 * its datagram as it arrived from saddr to daddr at stage; e NULL removes
 * what an earlier datagram left under the same key (a source's IPv4 ids
 * wrap), so its later fragments are not taken for this one's. Anything but
 * a first fragment: one test.
 */
static __always_inline void frag_record(struct __sk_buff *skb, const struct ipv4_info *info,
					__be32 saddr, __be32 daddr, __u8 stage,
					const struct frag_entry *e)
{
	struct frag_key key = {};

	if (!ipv4_first_frag(info) || frag_key_of(skb, saddr, daddr, info->proto, stage, &key) < 0)
		return;
	if (!e) {
		bpf_map_delete_elem(&myelin_frags, &key);
		return;
	}
	/* LRU: a failed insert loses this datagram's later fragments, nothing else. */
	bpf_map_update_elem(&myelin_frags, &key, e, BPF_ANY);
}

/*
 * frag_note records what stage made of a first fragment that arrived from
 * saddr to daddr (info: as it leaves the stage); an untranslated one
 * removes an earlier datagram's entry (frag_record).
 */
static __always_inline void frag_note(struct __sk_buff *skb, const struct ipv4_info *info,
				      __be32 saddr, __be32 daddr, __u8 stage, int route)
{
	struct frag_entry e = {.saddr = info->saddr, .daddr = info->daddr, .route = route};
	int same = saddr == info->saddr && daddr == info->daddr;

	frag_record(skb, info, saddr, daddr, stage, same ? NULL : &e);
}

/*
 * frag_mark records whether stage passed first fragment info (frag_marked);
 * host: the host's own stack sent it, so only the host's later fragments
 * ride the mark.
 */
static __always_inline void frag_mark(struct __sk_buff *skb, const struct ipv4_info *info,
				      __u8 stage, int pass, __u8 host)
{
	struct frag_entry e = {.saddr = info->saddr, .daddr = info->daddr, .host = host};

	frag_record(skb, info, info->saddr, info->daddr, stage, pass ? &e : NULL);
}

/*
 * frag_marked says whether stage passed the first fragment of later fragment
 * info, sent by the host's own stack when from_host: a first fragment the
 * host sent marks its datagram for the host's fragments only.
 */
static __always_inline int frag_marked(struct __sk_buff *skb, const struct ipv4_info *info,
				       __u8 stage, __u8 from_host)
{
	const struct frag_entry *e = frag_lookup(skb, info, stage);

	return e && (!e->host || from_host);
}

#endif /* MYELIN_LIB_FRAG_H */
