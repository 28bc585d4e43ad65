/* Socket filter reading the packet through bpf_skb_load_bytes (socket filters have no direct
 * packet access): offset 0 is the network header because the kernel pulled the Ethernet
 * header. Reads a 20-byte IPv4 header and 4 bytes of ports, checks the helper's error on
 * truncated packets (-EFAULT) and counts protocols in a hash map. Returns the number of bytes
 * to keep (the socket filter verdict): the whole packet for UDP, 0 for everything else.
 * Input dependence: skb->protocol, the IPv4 header and ports; maps: protos, results. */
#include "common.h"

RESULTS_MAP(4);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} protos SEC(".maps");

SEC("socket")
int socket_load_bytes(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return 0;
	struct iphdr ip;
	long ret = bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip));
	record(0, (__u64)ret);
	if (ret < 0)
		return 0;
	__u32 key = ip.protocol;
	__u64 one = 1;
	__u64 *count = bpf_map_lookup_elem(&protos, &key);
	if (count)
		*count += 1;
	else
		bpf_map_update_elem(&protos, &key, &one, BPF_ANY);

	__u32 ports = 0;
	ret = bpf_skb_load_bytes(skb, ip.ihl * 4, &ports, sizeof(ports));
	record(1, (__u64)ret);
	record(2, bpf_ntohl(ports));
	record(3, bpf_ntohl(ip.saddr) ^ bpf_ntohl(ip.daddr));
	return ip.protocol == IPPROTO_UDP ? skb->len : 0;
}

char LICENSE[] SEC("license") = "GPL";
