/* Shared by the NIC-FIX socket filters (thesis 7.3.1, Figure 7.8): the map layouts user
 * space decodes (kernel/src/ebpf.rs mirrors every struct here byte for byte) and the
 * frame parsing. A socket filter on an AF_PACKET socket sees the frame from its MAC
 * header: offset 0 is the Ethernet destination address, skb->len the frame's length. */
#ifndef NICFIX_H
#define NICFIX_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Keep every frame whole / drop it (the socket filter's return value is the number of
 * bytes to keep). */
#define PASS(skb) ((skb)->len)
#define DROP 0

/* An array map of `n` __u64 counters or settings, indexed from 0; `kind` is
 * BPF_MAP_TYPE_ARRAY or BPF_MAP_TYPE_PERCPU_ARRAY. User space finds it by `name`. */
#define U64_ARRAY(name, kind, n)          \
	struct {                          \
		__uint(type, kind);       \
		__uint(max_entries, n);   \
		__type(key, __u32);       \
		__type(value, __u64);     \
	} name SEC(".maps")

/* A flow: the IPv4 or IPv6 5-tuple; ports only for TCP and UDP (first fragment); for
 * frames that are not IP (or too short to be), family 0 and the ethertype. 40 bytes. */
struct flow_key {
	__u8 family;     /* 4, 6, or 0 for not IP */
	__u8 proto;      /* IP protocol / IPv6 next header (no extension headers followed) */
	__u16 sport;     /* host byte order */
	__u16 dport;
	__u16 ethertype; /* host byte order */
	__u8 src[16];    /* IPv4: first 4 bytes */
	__u8 dst[16];
};

struct flow_val {
	__u64 packets;
	__u64 bytes;
};

static __always_inline __u16 load_be16(struct __sk_buff *skb, __u32 off)
{
	__u8 b[2] = {0, 0};
	if (bpf_skb_load_bytes(skb, off, b, 2) < 0)
		return 0;
	return ((__u16)b[0] << 8) | b[1];
}

/* Fills `k` from the frame; the same rules as filters/src/nicfix.rs `flow_key`. */
static __always_inline void parse_flow(struct __sk_buff *skb, struct flow_key *k)
{
	__u32 len = skb->len;
	__u8 h[40];
	__u32 l4 = 0;

	if (len < 14)
		return;
	k->ethertype = load_be16(skb, 12);
	if (k->ethertype == 0x0800 && len >= 14 + 20) {
		if (bpf_skb_load_bytes(skb, 14, h, 20) < 0)
			return;
		__u32 ihl = (h[0] & 0x0f) * 4;
		if ((h[0] >> 4) != 4 || ihl < 20)
			return;
		k->family = 4;
		k->proto = h[9];
		__builtin_memcpy(k->src, &h[12], 4);
		__builtin_memcpy(k->dst, &h[16], 4);
		__u16 frag = ((__u16)(h[6] & 0x1f) << 8) | h[7];
		if (frag == 0)
			l4 = 14 + ihl;
	} else if (k->ethertype == 0x86dd && len >= 14 + 40) {
		if (bpf_skb_load_bytes(skb, 14, h, 40) < 0)
			return;
		if ((h[0] >> 4) != 6)
			return;
		k->family = 6;
		k->proto = h[6];
		__builtin_memcpy(k->src, &h[8], 16);
		__builtin_memcpy(k->dst, &h[24], 16);
		l4 = 14 + 40;
	} else {
		return;
	}
	if (l4 && (k->proto == 6 || k->proto == 17) && len >= l4 + 4) {
		k->sport = load_be16(skb, l4);
		k->dport = load_be16(skb, l4 + 2);
	}
}

#endif
