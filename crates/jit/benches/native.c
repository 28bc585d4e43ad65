/* The logic of bpf/jit/bench.c in plain C, built with gcc -O2 by crates/jit/benches/tiers.rs
 * as the native baseline. Each function takes the frame as [data, end); map_loop's map is a
 * plain array. Keep in step with bench.c. */
#include <stdint.h>
#include <string.h>

#define ETH_HLEN 14

uint32_t hash_loop(const uint8_t *p, const uint8_t *end)
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 512; i++) {
		if (p + i + 1 > end)
			break;
		h = (h ^ p[i]) * 16777619u;
	}
	return h;
}

uint32_t checksum(const uint8_t *data, const uint8_t *end)
{
	const uint8_t *w = data + ETH_HLEN;
	uint64_t sum = 0;
	for (int i = 0; i < 512; i++) {
		if (w + 2 * i + 2 > end)
			break;
		uint16_t v;
		memcpy(&v, w + 2 * i, 2);
		sum += v;
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (~sum) & 0xffff;
}

uint32_t parse(const uint8_t *p, const uint8_t *end)
{
	if (p + 14 > end)
		return 1;
	uint16_t proto = (p[12] << 8) | p[13];
	uint32_t off = 14;
	if (proto == 0x8100) {
		if (p + 18 > end)
			return 2;
		proto = (p[16] << 8) | p[17];
		off = 18;
	}
	uint32_t h = 0x9747b28c;
	uint8_t l4;
	const uint8_t *ip = p + off;
	if (proto == 0x0800) {
		if (ip + 20 > end)
			return 3;
		uint32_t ihl = (ip[0] & 0xf) * 4;
		if (ihl < 20 || ihl > 60)
			return 4;
		l4 = ip[9];
		for (int i = 12; i < 20; i++)
			h = (h ^ ip[i]) * 0x01000193;
		off += ihl;
	} else if (proto == 0x86dd) {
		if (ip + 40 > end)
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
	const uint8_t *t = p + off;
	if (t + 4 > end)
		return 8;
	uint32_t ports = ((uint32_t)t[0] << 24) | (t[1] << 16) | (t[2] << 8) | t[3];
	h = (h ^ ports) * 0x01000193;
	return h ^ l4;
}

uint32_t small_sort(const uint8_t *p, const uint8_t *end)
{
	uint8_t a[32];
	if (p + 32 + ETH_HLEN > end)
		return 0;
	memcpy(a, p + ETH_HLEN, 32);
	for (uint32_t i = 1; i < 32; i++) {
		for (uint32_t j = i; j > 0 && j < 32; j--) {
			if (a[j - 1] <= a[j])
				break;
			uint8_t t = a[j];
			a[j] = a[j - 1];
			a[j - 1] = t;
		}
	}
	uint32_t s = 0;
	for (int i = 0; i < 32; i++)
		s = s * 31 + a[i];
	return s;
}

uint64_t counters[64];

uint32_t map_loop(const uint8_t *p, const uint8_t *end)
{
	if (p + 64 > end)
		return 0;
	uint64_t sum = 0;
	for (uint32_t i = 0; i < 64; i++) {
		uint32_t key = (i * 7 + p[i]) & 63;
		uint64_t *v = &counters[key];
		*v += i;
		sum += *v;
	}
	return (uint32_t)sum ^ (uint32_t)(sum >> 32);
}
