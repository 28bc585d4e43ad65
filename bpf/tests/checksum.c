/* Internet checksums: verifies the IPv4 header checksum (ones'-complement sum over IHL 16-bit
 * words, a bounded loop), computes the RFC 1071 checksum of up to 256 bytes after the IP header,
 * then writes a corrected header checksum into the packet (the frame out must match too).
 * Input dependence: the IPv4 header and payload bytes; returns (header valid << 16) | payload
 * checksum, or 0xffff0000 + reason when the frame is not IPv4 or is truncated. */
#include "common.h"

RESULTS_MAP(4);

static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

SEC("xdp")
int checksum(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0xffff0001;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return 0xffff0002;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return 0xffff0003;
	__u32 ihl_words = ip->ihl * 2;
	if (ihl_words < 10)
		return 0xffff0004;

	__u64 sum = 0;
	__u16 *w = (__u16 *)ip;
#pragma clang loop unroll(disable)
	for (int i = 0; i < 30; i++) {
		if (i >= ihl_words)
			break;
		barrier_var(w);
		if ((void *)(w + 1) > end)
			return 0xffff0005;
		sum += *w;
		w++;
	}
	__u16 header = csum_fold(sum);
	record(0, header);

	/* Payload after the header, byte pairs in network order, an odd last byte padded. */
	__u8 *p = (__u8 *)w;
	__u64 psum = 0;
	__u32 n = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < 128; i++) {
		barrier_var(p);
		if ((void *)(p + 2) > end)
			break;
		psum += ((__u32)p[0] << 8) | p[1];
		p += 2;
		n += 2;
	}
	if ((void *)(p + 1) <= end) {
		psum += (__u32)p[0] << 8;
		n++;
	}
	__u16 payload = csum_fold(psum);
	record(1, payload);
	record(2, n);

	/* Recompute the header checksum in place. */
	__u16 old = ip->check;
	ip->check = 0;
	__u64 fix = sum - old;
	ip->check = csum_fold(fix);
	record(3, ip->check);
	return ((header == 0) << 16) | payload;
}

char LICENSE[] SEC("license") = "GPL";
