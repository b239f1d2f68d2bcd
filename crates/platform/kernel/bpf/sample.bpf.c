/* sample in the kernel: passes frame N, 2N, 3N, ... by a global packet counter (the same
 * rule as the user-space `sample every=N`); the others are dropped on the socket and never
 * copied to user space. */
#include "nicfix.h"

/* [0]: N (written by user space after loading, before the program is attached). */
U64_ARRAY(config, BPF_MAP_TYPE_ARRAY, 1);

/* [0]: frames seen, [1]: frames passed. */
U64_ARRAY(counters, BPF_MAP_TYPE_ARRAY, 2);

SEC("socket")
int sample(struct __sk_buff *skb)
{
	__u32 k0 = 0, k1 = 1;
	__u64 *every = bpf_map_lookup_elem(&config, &k0);
	__u64 *seen = bpf_map_lookup_elem(&counters, &k0);
	__u64 *passed = bpf_map_lookup_elem(&counters, &k1);

	if (!every || !seen || !passed || *every == 0)
		return PASS(skb);
	/* The frame's number, 1-based; atomic so concurrent CPUs each get their own. */
	__u64 n = __sync_fetch_and_add(seen, 1) + 1;
	if (n % *every != 0)
		return DROP;
	__sync_fetch_and_add(passed, 1);
	return PASS(skb);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
