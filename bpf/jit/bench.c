/* JIT benchmark kernels (crates/jit/benches/tiers.rs). Each is an XDP program over one frame;
 * crates/jit/benches/native.c holds the same logic in C for the gcc -O2 baseline. Keep the two
 * in step. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define ETH_HLEN 14

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* FNV-1a over up to 512 bytes of the frame. */
SEC("xdp")
int hash_loop(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 h = 2166136261u;
	for (int i = 0; i < 512; i++) {
		if ((void *)(p + i + 1) > end)
			break;
		h = (h ^ p[i]) * 16777619u;
	}
	return h;
}

/* RFC 1071 ones'-complement sum of up to 1024 bytes after the Ethernet header. */
SEC("xdp")
int checksum(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u16 *w = (__u16 *)(data + ETH_HLEN);
	__u64 sum = 0;
	for (int i = 0; i < 512; i++) {
		if ((void *)(w + i + 1) > end)
			break;
		sum += w[i];
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (~sum) & 0xffff;
}

/* Ethernet, optional 802.1Q, IPv4 or IPv6, TCP or UDP ports: a hash of the 5-tuple. */
SEC("xdp")
int parse(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(p + 14) > end)
		return 1;
	__u16 proto = (p[12] << 8) | p[13];
	__u32 off = 14;
	if (proto == 0x8100) {
		if ((void *)(p + 18) > end)
			return 2;
		proto = (p[16] << 8) | p[17];
		off = 18;
	}
	__u32 h = 0x9747b28c;
	__u8 l4;
	__u8 *ip = p + off;
	if (proto == 0x0800) {
		if ((void *)(ip + 20) > end)
			return 3;
		__u32 ihl = (ip[0] & 0xf) * 4;
		if (ihl < 20 || ihl > 60)
			return 4;
		l4 = ip[9];
		for (int i = 12; i < 20; i++)
			h = (h ^ ip[i]) * 0x01000193;
		off += ihl;
	} else if (proto == 0x86dd) {
		if ((void *)(ip + 40) > end)
			return 5;
		l4 = ip[6];
		for (int i = 8; i < 40; i++)
			h = (h ^ ip[i]) * 0x01000193;
		off += 40;
	} else {
		return 6;
	}
	if (l4 != 6 && l4 != 17)
		return h ^ l4;
	if (off > 200)
		return 7;
	__u8 *t = p + off;
	if ((void *)(t + 4) > end)
		return 8;
	__u32 ports = (t[0] << 24) | (t[1] << 16) | (t[2] << 8) | t[3];
	h = (h ^ ports) * 0x01000193;
	return h ^ l4;
}

/* Insertion sort of 32 bytes of the frame in a stack array; a weighted sum of the result. */
SEC("xdp")
int small_sort(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 a[32];
	if ((void *)(p + 32 + ETH_HLEN) > end)
		return 0;
	__builtin_memcpy(a, p + ETH_HLEN, 32);
	for (__u32 i = 1; i < 32; i++) {
		for (__u32 j = i; j > 0 && j < 32; j--) {
			if (a[j - 1] <= a[j])
				break;
			__u8 t = a[j];
			a[j] = a[j - 1];
			a[j - 1] = t;
		}
	}
	__u32 s = 0;
	for (int i = 0; i < 32; i++)
		s = s * 31 + a[i];
	return s;
}

/* 64 array-map lookups and updates keyed by frame bytes. */
SEC("xdp")
int map_loop(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(p + 64) > end)
		return 0;
	__u64 sum = 0;
	for (__u32 i = 0; i < 64; i++) {
		__u32 key = (i * 7 + p[i]) & 63;
		__u64 *v = bpf_map_lookup_elem(&counters, &key);
		if (!v)
			return 1;
		*v += i;
		sum += *v;
	}
	return (__u32)sum ^ (__u32)(sum >> 32);
}

char LICENSE[] SEC("license") = "GPL";
