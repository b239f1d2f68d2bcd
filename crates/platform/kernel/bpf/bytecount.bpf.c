/* bytecount in the kernel (thesis Figure 7.8 C, "count all occurrences of a character"),
 * generalized to all 256 byte values: a histogram of the first `len` bytes of every frame
 * (from the MAC header), per CPU so that no counter is shared; user space sums the CPUs.
 * Passes every frame. */
#include "nicfix.h"

#define CHUNK 64
#define MAX_LEN 4096 /* keep in step with kernel/src/ebpf.rs BYTECOUNT_MAX_LEN */

struct hist {
	__u64 count[256];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist);
} hist SEC(".maps");

/* [0]: frames, [1]: bytes counted (per CPU). */
U64_ARRAY(counters, BPF_MAP_TYPE_PERCPU_ARRAY, 2);

/* [0]: how many leading bytes of each frame to count (1..=MAX_LEN). */
U64_ARRAY(config, BPF_MAP_TYPE_ARRAY, 1);

SEC("socket")
int bytecount(struct __sk_buff *skb)
{
	__u32 k0 = 0, k1 = 1;
	__u64 *limit = bpf_map_lookup_elem(&config, &k0);
	struct hist *h = bpf_map_lookup_elem(&hist, &k0);
	__u64 *frames = bpf_map_lookup_elem(&counters, &k0);
	__u64 *bytes = bpf_map_lookup_elem(&counters, &k1);
	__u8 buf[CHUNK];

	if (!limit || !h || !frames || !bytes)
		return PASS(skb);
	__u32 n = skb->len;
	if (n > *limit)
		n = *limit;
	if (n > MAX_LEN)
		n = MAX_LEN;
	*frames += 1;
	*bytes += n;
	for (__u32 off = 0; off < MAX_LEN; off += CHUNK) {
		if (off >= n)
			break;
		__u32 take = n - off;
		if (take >= CHUNK) {
			if (bpf_skb_load_bytes(skb, off, buf, CHUNK) < 0)
				break;
			take = CHUNK;
		} else {
			/* The last, partial chunk: a variable length the verifier can bound. */
			take &= CHUNK - 1;
			if (take == 0 || bpf_skb_load_bytes(skb, off, buf, take) < 0)
				break;
		}
		for (__u32 i = 0; i < CHUNK; i++) {
			if (i >= take)
				break;
			h->count[buf[i]] += 1;
		}
	}
	return PASS(skb);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
