/* flowcount in the kernel (thesis Figure 7.8 B, "count flow activity"): packets and bytes
 * per flow in an LRU hash keyed by the 5-tuple, totals in `totals`. Passes every frame. */
#include "nicfix.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536); /* flows= sets it before loading */
	__type(key, struct flow_key);
	__type(value, struct flow_val);
} flows SEC(".maps");

/* [0]: every frame the program saw (also those whose flow entry was evicted). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow_val);
} totals SEC(".maps");

SEC("socket")
int flowcount(struct __sk_buff *skb)
{
	struct flow_key k;
	__u64 len = skb->len;
	__u32 zero = 0;

	__builtin_memset(&k, 0, sizeof(k));
	parse_flow(skb, &k);
	struct flow_val *t = bpf_map_lookup_elem(&totals, &zero);
	if (t) {
		__sync_fetch_and_add(&t->packets, 1);
		__sync_fetch_and_add(&t->bytes, len);
	}
	struct flow_val *v = bpf_map_lookup_elem(&flows, &k);
	if (!v) {
		struct flow_val fresh = {0, 0};
		/* Another CPU may insert the same flow first: then add to its entry. */
		bpf_map_update_elem(&flows, &k, &fresh, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&flows, &k);
	}
	if (v) {
		__sync_fetch_and_add(&v->packets, 1);
		__sync_fetch_and_add(&v->bytes, len);
	}
	return PASS(skb);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
