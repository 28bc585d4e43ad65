// RDMA access control at a packet hook: the enforcement half of rdx-acl.
//
// For every frame the host hands to the `acl_packet` hook (bpf/acl/acl.yaml) this program
// parses RoCEv2 (Ethernet, VLAN tags, IPv4/IPv6, UDP 4791) or native InfiniBand (LRH, GRH),
// the BTH and its extension headers and CM MADs on QP1; resolves the CM fields from the
// connection table `acl_cm`; finds the first matching rule of the compiled policy; counts;
// and, for allowed CM messages, updates the connection table. It returns 0 (allow) or
// 1 (deny) and writes why into the context.
//
// The compiled policy is the native cut tree of rdx-acl (crates/acl/src/classify/tree.rs)
// serialised into flat arrays of fixed-size records (crates/acl/src/classify/image.rs): the
// words array `acl_words` (nodes, child references, leaves), the compact leaf entries
// `acl_entries`, the 224-byte rules `acl_rules` and what each rule decides `acl_decisions`.
// Each array map holds two banks. This
// program's own small global-data section `.data.acl` (`struct acl_ctl`) names the bank, the
// trees' roots and where each tier starts: a control plane writes a new rule set into the
// bank no running version uses, then publishes a version whose section names it (one
// compare-and-swap on the hook slot switches program, layout and bank together), and reuses
// the old bank only after the node's epochs show no thread still runs the old version. No
// packet is ever classified by a mix of two rule sets.
//
// In front of the trees, a per-thread hot-flow table (in the thread's `acl_scratch` value)
// keeps the decision of recent flows, keyed by the whole match key and tagged with the
// version's `tag`, so a publication invalidates it. `acl_cm` and `acl_scratch` are named
// maps, reused by every version: connection state and counters (the first 192 bytes of each
// thread's `acl_scratch` value) survive policy updates.
//
// The native engine (crates/acl/src/engine.rs) is the oracle this program is tested against;
// field meanings, malformed reasons and CM semantics follow it exactly (docs/acl.md).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// One bank of each array (the maps hold two); crates/acl/src/enforce.rs mirrors these.
#define ACL_BANK_WORD_RECORDS (1 << 18)
#define ACL_BANK_ENTRIES 655360
#define ACL_BANK_RULES 327680
// Deepest tree walk (the tree builder stops at 24), longest leaf scanned.
#define ACL_MAX_DEPTH 26
#define ACL_MAX_LEAF 4096
#define ACL_MAX_GROUPS 8
#define ACL_LEAF_REF 0x80000000u
// A leaf reference naming the leaf's entries directly (image.rs, INLINE_LEAF): bit 30 set,
// the length in bits 20..30, the tier's first entry in bits 0..20; no leaf words to read.
#define ACL_INLINE_LEAF 0x40000000u
// Hot-flow table entries per thread (a power of two).
#define ACL_HOT 1024
// Largest header offset ever dereferenced: Ethernet, two tags, IPv6 with four 2 KiB
// extension headers, UDP, BTH, extension headers and a MAD stay below 8.5 KiB.
#define ACL_MAX_OFF 16383

struct acl_ctx {
	__u64 data;       // packet_start
	__u64 data_end;   // packet_end
	__u32 link;       // 0 Ethernet (RoCEv2), 1 InfiniBand (LRH first)
	__u32 len;        // frame length
	__u32 rule;       // out: deciding rule index, or 0xffffffff
	__u32 policy;     // out: deciding policy index (apply order), or 0xffffffff
	__u32 cause;      // out: ACL_CAUSE_*
	__u32 reason;     // out: malformed reason (MalformedReason), when cause is malformed
	__u64 generation; // out: generation word of the rule image that decided
};

enum {
	ACL_CAUSE_RULE = 0,
	ACL_CAUSE_DEFAULT = 1,
	ACL_CAUSE_MALFORMED = 2,
	ACL_CAUSE_NOT_RDMA = 3,
};

// Malformed reasons, in the order of rdx_acl::packet::MalformedReason.
enum {
	M_TRUNCATED_L2 = 0,
	M_BAD_IP_HEADER,
	M_IP_FRAGMENT,
	M_BAD_UDP_LENGTH,
	M_BAD_LRH,
	M_BAD_GRH,
	M_TRUNCATED_TRANSPORT,
	M_BAD_TRANSPORT_VERSION,
	M_UNKNOWN_OPCODE,
	M_TRUNCATED_MAD,
	M_BAD_MAD,
	M_COUNT,
};

// Parser outcome: RDMA, not RDMA, or P_MALFORMED + reason.
#define P_RDMA 0
#define P_NOT_RDMA 1
#define P_MALFORMED 2
// Traffic that may carry RDMA the parser does not look into (RoCE v1, VXLAN, IPsec, IPv6
// extension headers it does not walk): the policy's default decides it
// (rdx_acl::packet::Parsed::Uninspected).
#define P_UNINSPECTED 64

// Field bits, as rdx_acl::field::Field.
enum {
	F_SIP = 0,
	F_DIP,
	F_SPORT,
	F_DPORT,
	F_SLID,
	F_DLID,
	F_SGID,
	F_DGID,
	F_CM_TYPE,
	F_LQPN,
	F_DQPN,
	F_OPCODE,
	F_VA,
	F_CM_FORGED,
};

// CM types, as rdx_acl::field::CmType.
enum {
	CM_REQ = 0,
	CM_MRA = 1,
	CM_REJ = 2,
	CM_REP = 3,
	CM_RTU = 4,
	CM_DREQ = 5,
	CM_DREP = 6,
	CM_SIDR_REQ = 7,
	CM_SIDR_REP = 8,
	CM_OTHER = 15,
};

struct acl_range128 {
	__u64 lo_hi, lo_lo, hi_hi, hi_lo;
};

// rdx_acl::rule::Rule, 224 bytes.
struct acl_rule {
	struct acl_range128 sip, dip, sgid, dgid;
	__u64 va_lo, va_hi;
	__u64 opcode_mask[4];
	__u32 lqpn_lo, lqpn_hi, dqpn_lo, dqpn_hi;
	__u16 sport_lo, sport_hi, dport_lo, dport_hi;
	__u16 slid_lo, slid_hi, dlid_lo, dlid_hi;
	__u16 cm_type_mask;
	__u8 forged_mask;
	__u8 action;
	__u16 absent_ok;
	__u16 reserved;
	__u32 policy;
	__u32 priority;
};
_Static_assert(sizeof(struct acl_rule) == 224, "rule layout");

// Where one priority tier lives (crates/acl/src/classify/image.rs, TierLayout): indices are
// absolute in the arrays (bank included).
struct acl_tier {
	__u32 lo, hi;        // priorities
	__u32 groups;        // trees
	__u32 nodes;         // word index of the node blocks: node r at nodes + 8 * r
	__u32 refs;          // word index a node's first-child offset is relative to: each
	                     // node's child references follow it in its block
	__u32 leaves;        // word index of leaf 0 (2 words per leaf: first entry, length)
	__u32 entries;       // entry index of the tier's entry 0
	__u32 pad;
	__u32 roots[ACL_MAX_GROUPS];
};
_Static_assert(sizeof(struct acl_tier) == 64, "tier layout");

// The per-version control block (image.rs, TreeImage::control).
struct acl_ctl {
	char magic[8];
	__u32 version;
	__u32 bank;
	__u64 generation;    // reported with every decision
	__u64 tag;           // unique per published version: hot-flow entries carry it
	__u32 rule_count;
	__u32 rules;         // rule index of rule 0 (bank included)
	__u32 tiers;
	__u32 default_deny;
	struct acl_tier tier[2];
};
_Static_assert(sizeof(struct acl_ctl) == 176, "control layout");

// No rule, default allow, until a control plane deploys a policy.
struct acl_ctl acl_ctl SEC(".data.acl") = {
	.magic = "RDXACLT",
	.version = 3,
};

struct acl_words {
	__u32 w[16];
};

// A compact leaf entry (the cut tree's 64-byte copy of a rule).
struct acl_entry {
	__u64 va_lo, va_hi, opcodes;
	__u32 sip_lo, sip_hi, dip_lo, dip_hi, dqpn_lo, dqpn_hi;
	__u16 sport_lo, sport_hi, dport_lo, dport_hi, absent_ok, flags;
	__u32 priority;
};
_Static_assert(sizeof(struct acl_entry) == 64, "entry layout");

#define E_SIP_V4 1
#define E_SIP_ANY 2
#define E_DIP_V4 4
#define E_DIP_ANY 8
#define E_INEXACT 16

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ACL_BANK_WORD_RECORDS);
	__type(key, __u32);
	__type(value, struct acl_words);
} acl_words SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ACL_BANK_ENTRIES);
	__type(key, __u32);
	__type(value, struct acl_entry);
} acl_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ACL_BANK_RULES);
	__type(key, __u32);
	__type(value, struct acl_rule);
} acl_rules SEC(".maps");

// What each rule decides, `policy << 8 | 0x80 | action`, indexed as `acl_rules`: a match
// reads 8 bytes instead of the rule's 224. Bit 7 marks a written slot (image.rs,
// DECISION_WRITTEN); the low byte must be exactly ACL_DECISION_ALLOW to allow.
#define ACL_DECISION_ALLOW 0x80
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ACL_BANK_RULES);
	__type(key, __u32);
	__type(value, __u64);
} acl_decisions SEC(".maps");

// Counters, one copy per host thread (index: S_*): the first member of the thread's
// `acl_scratch` value, so that one per-thread lookup serves the counters and the scratch
// space (crates/acl/src/enforce.rs, STATS_MAP and STATS_SIZE, reads them there).
enum {
	S_PACKETS = 0,
	S_ALLOWED,
	S_DENIED,
	S_NOT_RDMA,
	S_DEFAULT,
	S_MALFORMED, // M_COUNT entries
	S_CM_TABLE_FULL = S_MALFORMED + M_COUNT,
	S_CM_UNKNOWN,
	S_CM_CREATED,
	S_CM_REMOVED,
	S_UNINSPECTED,
	S_COUNT,
};

struct acl_stats {
	__u64 n[24];
};
_Static_assert(S_COUNT <= 24, "stats size");

// CM connections keyed by the active side: (endpoint, comm ID).
struct acl_conn_key {
	__u64 ep_hi, ep_lo;
	__u32 comm_id;
	__u32 kind; // EP_*
};

#define CONN_HAS_PASSIVE_COMM 1
#define CONN_HAS_PASSIVE_QPN 2
#define CONN_ESTABLISHED 4

struct acl_conn {
	__u64 active_hi, active_lo;
	__u64 passive_hi, passive_lo;
	__u32 active_comm, passive_comm;
	__u32 active_qpn, passive_qpn;
	__u32 flags;
	__u32 passive_kind; // EP_*
};

// As many connections as the native engine's table (rdx_acl::engine::DEFAULT_CM_CAPACITY):
// past it both count the REQ as `table_full` and keep no state.
#define ACL_CM_CAPACITY 65536

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ACL_CM_CAPACITY);
	__type(key, struct acl_conn_key);
	__type(value, struct acl_conn);
} acl_cm SEC(".maps");

// What the parser found, and the key the rules are matched against.
struct acl_pkt {
	// Match key.
	__u64 sip_hi, sip_lo, dip_hi, dip_lo;
	__u64 sgid_hi, sgid_lo, dgid_hi, dgid_lo;
	__u64 va;
	__u32 lqpn, dqpn;
	__u32 present;
	__u16 sport, dport, slid, dlid;
	__u8 opcode, cm_type, forged, is_cm;
	// Parser-only state.
	__u32 dest_qp;
	__u32 src_qp;
	__u32 cm_local, cm_remote;
	__u32 cm_qpn;
	__u8 has_src_qp, has_cm_qpn, has_ip, has_gid;
	__u8 has_lid, has_mad, pad[2];
	// Where the next parsing stage starts and where the transport ends (the ICRC).
	__u32 next_at, limit;
};

_Static_assert(__builtin_offsetof(struct acl_pkt, dest_qp) == 96, "match key is 96 bytes");

// A remembered decision: the match key, the version's tag, the outcome.
struct acl_hot {
	__u64 key[12];
	__u64 tag;
	__u32 rule, policy;
	__u32 action, pad;
	__u64 pad2;
};
_Static_assert(sizeof(struct acl_hot) == 128, "hot entry");

// Per-thread state: the counters, the packet being decided, its match fields by field index
// (high, low halves) for the tree walk, and the hot-flow table.
struct acl_thread {
	struct acl_stats st; // at offset 0: readers take the first 192 bytes
	struct acl_pkt p;
	__u64 vals[16][2];
	__u32 leaves[ACL_MAX_GROUPS];
	struct acl_hot hot[ACL_HOT];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct acl_thread);
} acl_scratch SEC(".maps");

#define BIT(f) (1u << (f))

// Big-endian header fields: one load of the whole field (the verifier admits misaligned
// packet loads) and a byte swap, instead of a load, shift and or per byte.
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FROM_BE16(x) __builtin_bswap16(x)
#define FROM_BE32(x) __builtin_bswap32(x)
#define FROM_BE64(x) __builtin_bswap64(x)
#else
#define FROM_BE16(x) (x)
#define FROM_BE32(x) (x)
#define FROM_BE64(x) (x)
#endif

static __always_inline __u16 be16(const __u8 *p)
{
	return FROM_BE16(*(const __u16 *)p);
}

static __always_inline __u32 be24(const __u8 *p)
{
	return ((__u32)be16(p) << 8) | p[2];
}

static __always_inline __u32 be32(const __u8 *p)
{
	return FROM_BE32(*(const __u32 *)p);
}

static __always_inline __u64 be64(const __u8 *p)
{
	return FROM_BE64(*(const __u64 *)p);
}

// Which extension headers follow the BTH for an opcode (rdx_acl::field::opcode_headers).
#define H_DETH 1
#define H_RETH 2
#define H_ATOMIC_ETH 4
#define H_AETH 8
#define H_ATOMIC_ACK 16
#define H_IMM 32
#define H_IETH 64
#define H_UNKNOWN 128

static __always_inline __u32 opcode_headers(__u8 op)
{
	__u8 transport = op >> 5;
	__u8 code = op & 0x1f;
	if (transport == 0 || (transport == 1 && code <= 0x0b)) {
		switch (code) {
		case 0x00: case 0x01: case 0x02: case 0x04:
		case 0x07: case 0x08: case 0x0e:
			return 0;
		case 0x03: case 0x05: case 0x09:
			return H_IMM;
		case 0x06: case 0x0a: case 0x0c:
			return H_RETH;
		case 0x0b:
			return H_RETH | H_IMM;
		case 0x0d: case 0x0f: case 0x10: case 0x11:
			return H_AETH;
		case 0x12:
			return H_AETH | H_ATOMIC_ACK;
		case 0x13: case 0x14:
			return H_ATOMIC_ETH;
		case 0x16: case 0x17:
			return H_IETH;
		default:
			return H_UNKNOWN;
		}
	}
	if (op == 0x64)
		return H_DETH;
	if (op == 0x65)
		return H_DETH | H_IMM;
	if (op == 0x81)
		return 0;
	return H_UNKNOWN;
}

// The frame, in a function that reads it.
#define FRAME                                                                               \
	const __u8 *pkt = (const __u8 *)(long)ctx->data;                                     \
	const __u8 *pkt_end = (const __u8 *)(long)ctx->data_end

// `var` points at `n` bytes at `off`, which lie before `limit` and in the frame; otherwise
// the function returns `fail`. Plain branches, no "pointer or NULL" value: the compiler
// turns a NULL test of such a value back into the bounds comparison, which the verifier
// cannot relate to the first one.
#define FETCH(var, off, n, limit, fail)                                                     \
	if ((off) > ACL_MAX_OFF || (off) + (n) > (limit))                                    \
		return (fail);                                                               \
	const __u8 *var = pkt + (off);                                                       \
	if (var + (n) > pkt_end)                                                             \
		return (fail)

static __noinline int parse_cm_mad(const struct acl_ctx *ctx, struct acl_pkt *p)
{
	FRAME;
	__u32 at = p->next_at, limit = p->limit;
	FETCH(hdr, at, 24, limit, P_MALFORMED + M_TRUNCATED_MAD);
	if (hdr[0] != 1)
		return P_MALFORMED + M_BAD_MAD;
	if (hdr[1] != 0x07)
		return P_RDMA;
	__u16 attr = be16(hdr + 16);
	__u8 kind = attr >= 0x10 && attr <= 0x1a ? attr - 0x10 : CM_OTHER;
	__u32 need;
	switch (kind) {
	case CM_REQ:
		need = 36;
		break;
	case CM_REP:
		need = 16;
		break;
	case CM_DREQ:
		need = 12;
		break;
	case CM_OTHER: case CM_SIDR_REQ: case CM_SIDR_REP:
		need = 4;
		break;
	default:
		need = 8;
	}
	__u32 data_at = at + 24;
	if (data_at + need > limit)
		return P_MALFORMED + M_TRUNCATED_MAD;
	// Each message's bytes are fetched with a constant length, so that the verifier knows
	// the range of every load.
	p->has_cm_qpn = 0;
	p->cm_remote = 0;
	switch (kind) {
	case CM_REQ:
		FETCH(d36, data_at, 36, limit, P_MALFORMED + M_TRUNCATED_MAD);
		p->cm_local = be32(d36);
		p->cm_qpn = be24(d36 + 32);
		p->has_cm_qpn = 1;
		break;
	case CM_REP:
		FETCH(d16, data_at, 16, limit, P_MALFORMED + M_TRUNCATED_MAD);
		p->cm_local = be32(d16);
		p->cm_remote = be32(d16 + 4);
		p->cm_qpn = be24(d16 + 12);
		p->has_cm_qpn = 1;
		break;
	case CM_DREQ:
		FETCH(d12, data_at, 12, limit, P_MALFORMED + M_TRUNCATED_MAD);
		p->cm_local = be32(d12);
		p->cm_remote = be32(d12 + 4);
		p->cm_qpn = be24(d12 + 8);
		p->has_cm_qpn = 1;
		break;
	case CM_OTHER: case CM_SIDR_REQ: case CM_SIDR_REP:
		FETCH(d4, data_at, 4, limit, P_MALFORMED + M_TRUNCATED_MAD);
		p->cm_local = be32(d4);
		break;
	default:
		FETCH(d8, data_at, 8, limit, P_MALFORMED + M_TRUNCATED_MAD);
		p->cm_local = be32(d8);
		p->cm_remote = be32(d8 + 4);
	}
	p->is_cm = 1;
	p->cm_type = kind;
	p->forged = !(p->has_src_qp && p->src_qp == 1);
	return P_RDMA;
}

// BTH and what follows, up to `limit` (the ICRC's offset).
static __noinline int parse_transport(const struct acl_ctx *ctx, struct acl_pkt *p)
{
	FRAME;
	__u32 at = p->next_at, limit = p->limit;
	FETCH(bth, at, 12, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
	__u8 opcode = bth[0];
	if (bth[1] & 0x0f)
		return P_MALFORMED + M_BAD_TRANSPORT_VERSION;
	p->opcode = opcode;
	p->dest_qp = be24(bth + 5);
	__u32 h = opcode_headers(opcode);
	if (h & H_UNKNOWN)
		return P_MALFORMED + M_UNKNOWN_OPCODE;
	at += 12;
	if (h & H_DETH) {
		FETCH(deth, at, 8, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		p->src_qp = be24(deth + 5);
		p->has_src_qp = 1;
		at += 8;
	}
	if (h & H_RETH) {
		FETCH(reth, at, 16, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		p->va = be64(reth);
		p->present |= BIT(F_VA);
		at += 16;
	}
	if (h & H_ATOMIC_ETH) {
		FETCH(aeth, at, 28, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		p->va = be64(aeth);
		p->present |= BIT(F_VA);
		at += 28;
	}
	if (h & H_AETH) {
		FETCH(skip, at, 4, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		(void)skip;
		at += 4;
	}
	if (h & H_ATOMIC_ACK) {
		FETCH(skip, at, 8, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		(void)skip;
		at += 8;
	}
	if (h & H_IMM) {
		FETCH(skip, at, 4, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		(void)skip;
		at += 4;
	}
	if (h & H_IETH) {
		FETCH(skip, at, 4, limit, P_MALFORMED + M_TRUNCATED_TRANSPORT);
		(void)skip;
		at += 4;
	}
	if ((h & H_DETH) && p->dest_qp == 1)
	{
		p->has_mad = 1;
		p->next_at = at;
	}
	return P_RDMA;
}

static __noinline int parse_ethernet(const struct acl_ctx *ctx, struct acl_pkt *p)
{
	FRAME;
	__u32 buflen = ctx->len;
	FETCH(eth, 0, 14, buflen, P_MALFORMED + M_TRUNCATED_L2);
	__u16 ethertype = be16(eth + 12);
	__u32 off = 14;
	for (int tags = 0; tags < 3; tags++) {
		// 802.1Q, 802.1ad and the pre-standard service-tag TPIDs.
		if (ethertype != 0x8100 && ethertype != 0x88a8 && ethertype != 0x9100 &&
		    ethertype != 0x9200 && ethertype != 0x9300)
			break;
		if (tags == 2)
			return P_MALFORMED + M_TRUNCATED_L2;
		FETCH(tag, off, 4, buflen, P_MALFORMED + M_TRUNCATED_L2);
		ethertype = be16(tag + 2);
		off += 4;
	}
	__u32 udp_at, ip_end;
	if (ethertype == 0x0800) {
		FETCH(ip, off, 20, buflen, P_MALFORMED + M_BAD_IP_HEADER);
		__u32 ihl = (ip[0] & 0x0f) * 4;
		__u32 total = be16(ip + 2);
		if ((ip[0] >> 4) != 4 || ihl < 20 || total < ihl || off + total > buflen)
			return P_MALFORMED + M_BAD_IP_HEADER;
		if (ip[9] == 50 || ip[9] == 51) // ESP, AH
			return P_UNINSPECTED;
		if (ip[9] != 17)
			return P_NOT_RDMA;
		if (be16(ip + 6) & 0x3fff)
			return P_MALFORMED + M_IP_FRAGMENT;
		p->sip_hi = 0;
		p->sip_lo = 0xffff00000000ull | be32(ip + 12);
		p->dip_hi = 0;
		p->dip_lo = 0xffff00000000ull | be32(ip + 16);
		udp_at = off + ihl;
		ip_end = off + total;
	} else if (ethertype == 0x86dd) {
		FETCH(ip, off, 40, buflen, P_MALFORMED + M_BAD_IP_HEADER);
		if ((ip[0] >> 4) != 6)
			return P_MALFORMED + M_BAD_IP_HEADER;
		__u32 end6 = off + 40 + be16(ip + 4);
		if (end6 > buflen)
			return P_MALFORMED + M_BAD_IP_HEADER;
		p->sip_hi = be64(ip + 8);
		p->sip_lo = be64(ip + 16);
		p->dip_hi = be64(ip + 24);
		p->dip_lo = be64(ip + 32);
		__u8 next = ip[6];
		__u32 at = off + 40;
		for (int exts = 0; exts < 5; exts++) {
			if (next == 17)
				break;
			if (next == 0 || next == 43 || next == 60 || next == 51) {
				if (exts == 4)
					return P_MALFORMED + M_BAD_IP_HEADER;
				FETCH(h, at, 8, end6, P_MALFORMED + M_BAD_IP_HEADER);
				// AH (51) counts its length in 4-byte units less 2, the others in
				// 8-byte units less 1.
				if (next == 51)
					at += ((__u32)h[1] + 2) * 4;
				else
					at += ((__u32)h[1] + 1) * 8;
				next = h[0];
			} else if (next == 44) {
				return P_MALFORMED + M_IP_FRAGMENT;
			} else if (next == 50 || next == 135 || next == 139 || next == 140 ||
				   next == 253 || next == 254) {
				return P_UNINSPECTED; // ESP, Mobility, HIP, Shim6, experimental
			} else {
				return P_NOT_RDMA;
			}
		}
		if (next != 17)
			return P_MALFORMED + M_BAD_IP_HEADER;
		udp_at = at;
		ip_end = end6;
	} else if (ethertype == 0x8915) {
		return P_UNINSPECTED; // RoCE v1
	} else {
		return P_NOT_RDMA;
	}
	p->has_ip = 1;
	FETCH(udp, udp_at, 8, ip_end, P_MALFORMED + M_BAD_UDP_LENGTH);
	__u32 udp_len = be16(udp + 4);
	if (udp_len < 8 || udp_at + udp_len > ip_end)
		return P_MALFORMED + M_BAD_UDP_LENGTH;
	__u16 dport = be16(udp + 2);
	if (dport == 4789)
		return P_UNINSPECTED; // VXLAN: the inner frame is not parsed
	if (dport != 4791)
		return P_NOT_RDMA;
	p->sport = be16(udp);
	p->dport = dport;
	p->present |= BIT(F_SIP) | BIT(F_DIP) | BIT(F_SPORT) | BIT(F_DPORT) | BIT(F_SGID) |
		      BIT(F_DGID);
	p->sgid_hi = p->sip_hi;
	p->sgid_lo = p->sip_lo;
	p->dgid_hi = p->dip_hi;
	p->dgid_lo = p->dip_lo;
	p->has_gid = 1;
	__u32 datagram_end = udp_at + udp_len;
	if (datagram_end < udp_at + 8 + 4)
		return P_MALFORMED + M_TRUNCATED_TRANSPORT;
	p->next_at = udp_at + 8;
	p->limit = datagram_end - 4;
	return P_RDMA;
}

static __noinline int parse_infiniband(const struct acl_ctx *ctx, struct acl_pkt *p)
{
	FRAME;
	__u32 buflen = ctx->len;
	FETCH(lrh, 0, 8, buflen, P_MALFORMED + M_BAD_LRH);
	__u8 lnh = lrh[1] & 0x03;
	__u32 pkt_len = (be16(lrh + 4) & 0x07ff) * 4;
	if (pkt_len > buflen || pkt_len < 8 + 12 + 4)
		return P_MALFORMED + M_BAD_LRH;
	p->dlid = be16(lrh + 2);
	p->slid = be16(lrh + 6);
	p->present |= BIT(F_SLID) | BIT(F_DLID);
	p->has_lid = 1;
	__u32 end = pkt_len - 4;
	__u32 at;
	if (lnh == 2) {
		at = 8;
	} else if (lnh == 3) {
		FETCH(grh, 8, 40, end, P_MALFORMED + M_BAD_GRH);
		if (grh[6] != 0x1b)
			return P_MALFORMED + M_BAD_GRH;
		p->sgid_hi = be64(grh + 8);
		p->sgid_lo = be64(grh + 16);
		p->dgid_hi = be64(grh + 24);
		p->dgid_lo = be64(grh + 32);
		p->present |= BIT(F_SGID) | BIT(F_DGID);
		p->has_gid = 1;
		at = 48;
	} else {
		return P_MALFORMED + M_BAD_LRH;
	}
	p->next_at = at;
	p->limit = end;
	return P_RDMA;
}

// The common frame in one pass, without the staged parsers: Ethernet without tags, IPv4
// without options, UDP 4791, a BTH whose opcode carries no DETH (so no CM MAD), every header
// inside the datagram and the frame, at least 62 bytes. Writes the whole match key (every
// word the hot-flow table compares; the parser-only fields are left as they were, nothing
// reads them on this path) and returns 1. Returns 0 for every other frame, which the staged
// parsers then decide, malformed ones included. It accepts a frame only where the staged
// parsers would parse it as RDMA with this same key: the checks below are theirs for this
// layout, at constant offsets.
static __always_inline int parse_fast(const struct acl_ctx *ctx, struct acl_pkt *p)
{
	FRAME;
	__u32 buflen = ctx->len;
	if (buflen < 62 || pkt + 62 > pkt_end)
		return 0;
	if (be16(pkt + 12) != 0x0800 || pkt[14] != 0x45 || pkt[23] != 17)
		return 0;
	__u32 total = be16(pkt + 16);
	if (total < 20 || 14 + total > buflen || (be16(pkt + 20) & 0x3fff))
		return 0;
	// UDP at 34: its length covers the BTH (42..54) before the 4-byte ICRC.
	__u32 udp_len = be16(pkt + 38);
	if (udp_len < 24 || 34 + udp_len > 14 + total || be16(pkt + 36) != 4791)
		return 0;
	__u32 limit = 34 + udp_len - 4;
	__u8 opcode = pkt[42];
	if (pkt[43] & 0x0f)
		return 0;
	__u32 h = opcode_headers(opcode);
	if (h & (H_UNKNOWN | H_DETH))
		return 0;
	__u32 end = 54;
	if (h & H_RETH)
		end += 16;
	if (h & H_ATOMIC_ETH)
		end += 28;
	if (h & H_AETH)
		end += 4;
	if (h & H_ATOMIC_ACK)
		end += 8;
	if (h & H_IMM)
		end += 4;
	if (h & H_IETH)
		end += 4;
	if (end > limit || end > buflen || pkt + end > pkt_end)
		return 0;
	__u32 present = BIT(F_SIP) | BIT(F_DIP) | BIT(F_SPORT) | BIT(F_DPORT) | BIT(F_SGID) |
			BIT(F_DGID) | BIT(F_OPCODE) | BIT(F_DQPN);
	__u64 va = 0;
	if (h & (H_RETH | H_ATOMIC_ETH)) {
		va = be64(pkt + 54);
		present |= BIT(F_VA);
	}
	__u64 sip = 0xffff00000000ull | be32(pkt + 26);
	__u64 dip = 0xffff00000000ull | be32(pkt + 30);
	p->sip_hi = 0;
	p->sip_lo = sip;
	p->dip_hi = 0;
	p->dip_lo = dip;
	p->sgid_hi = 0;
	p->sgid_lo = sip;
	p->dgid_hi = 0;
	p->dgid_lo = dip;
	p->va = va;
	p->lqpn = 0;
	p->dqpn = be24(pkt + 47);
	p->present = present;
	p->sport = be16(pkt + 34);
	p->dport = 4791;
	p->slid = 0;
	p->dlid = 0;
	p->opcode = opcode;
	p->cm_type = 0;
	p->forged = 0;
	p->is_cm = 0;
	return 1;
}

// CM endpoints: the IP address, else the GID (kind EP_ADDRESS), else the LID (kind EP_LID).
// The kind is part of the key (`acl_conn_key.kind`, `acl_conn.passive_kind`): a LID is not
// folded into the GID space, where a sender choosing the GID 8000::<LID> would pass for it
// (rdx_acl::packet::Endpoint).
#define EP_NONE 0
#define EP_ADDRESS 1
#define EP_LID 2

static __always_inline __u32 src_endpoint(const struct acl_pkt *p, __u64 *hi, __u64 *lo)
{
	if (p->has_ip || p->has_gid) {
		*hi = p->sgid_hi;
		*lo = p->sgid_lo;
		return EP_ADDRESS;
	}
	*hi = 0;
	if (p->has_lid) {
		*lo = p->slid;
		return EP_LID;
	}
	*lo = 0;
	return EP_NONE;
}

static __always_inline __u32 dst_endpoint(const struct acl_pkt *p, __u64 *hi, __u64 *lo)
{
	if (p->has_ip || p->has_gid) {
		*hi = p->dgid_hi;
		*lo = p->dgid_lo;
		return EP_ADDRESS;
	}
	*hi = 0;
	if (p->has_lid) {
		*lo = p->dlid;
		return EP_LID;
	}
	*lo = 0;
	return EP_NONE;
}

#define SIDE_NONE 0
#define SIDE_ACTIVE 1
#define SIDE_PASSIVE 2

// Finds the connection of a CM message (rdx_acl::cm::CmTable::lookup); fills `key`.
static __noinline int cm_lookup(const struct acl_pkt *p, struct acl_conn_key *key)
{
	__u64 src_hi, src_lo, dst_hi, dst_lo;
	__u32 src_kind = src_endpoint(p, &src_hi, &src_lo);
	__u32 dst_kind = dst_endpoint(p, &dst_hi, &dst_lo);
	__u32 local = p->cm_local, remote = p->cm_remote;
	if (p->cm_type != CM_REP) {
		key->ep_hi = src_hi;
		key->ep_lo = src_lo;
		key->comm_id = local;
		key->kind = src_kind;
		struct acl_conn *c = bpf_map_lookup_elem(&acl_cm, key);
		if (c) {
			int remote_ok = (c->flags & CONN_HAS_PASSIVE_COMM) ? c->passive_comm == remote
									   : remote == 0;
			if (c->passive_hi == dst_hi && c->passive_lo == dst_lo &&
			    c->passive_kind == dst_kind && remote_ok)
				return SIDE_ACTIVE;
		}
	}
	key->ep_hi = dst_hi;
	key->ep_lo = dst_lo;
	key->comm_id = remote;
	key->kind = dst_kind;
	struct acl_conn *c = bpf_map_lookup_elem(&acl_cm, key);
	if (c) {
		int local_ok;
		if (c->flags & CONN_HAS_PASSIVE_COMM)
			local_ok = c->passive_comm == local;
		else
			local_ok = p->cm_type == CM_REP || p->cm_type == CM_REJ;
		if (c->passive_hi == src_hi && c->passive_lo == src_lo &&
		    c->passive_kind == src_kind && local_ok)
			return SIDE_PASSIVE;
	}
	return SIDE_NONE;
}

// Fills lQPN/dQPN of a CM message (rdx_acl::cm::CmTable::resolve). Returns the side that
// sent it (for the commit), with `key` naming its connection.
static __always_inline int cm_resolve(struct acl_pkt *p, struct acl_conn_key *key,
				      struct acl_stats *st)
{
	__u8 kind = p->cm_type;
	if (kind == CM_REQ) {
		if (p->has_cm_qpn) {
			p->lqpn = p->cm_qpn & 0xffffff;
			p->present |= BIT(F_LQPN);
		}
		key->kind = src_endpoint(p, &key->ep_hi, &key->ep_lo);
		key->comm_id = p->cm_local;
		return SIDE_ACTIVE;
	}
	if (kind != CM_REP && kind != CM_RTU && kind != CM_REJ && kind != CM_DREQ &&
	    kind != CM_DREP)
		return SIDE_NONE;
	int side = cm_lookup(p, key);
	if (side == SIDE_NONE)
		st->n[S_CM_UNKNOWN]++;
	__u32 mine = 0, theirs = 0;
	int has_mine = 0, has_theirs = 0;
	if (side != SIDE_NONE) {
		struct acl_conn *c = bpf_map_lookup_elem(&acl_cm, key);
		if (!c)
			return SIDE_NONE;
		if (side == SIDE_ACTIVE) {
			mine = c->active_qpn;
			has_mine = 1;
			theirs = c->passive_qpn;
			has_theirs = (c->flags & CONN_HAS_PASSIVE_QPN) != 0;
		} else {
			mine = c->passive_qpn;
			has_mine = (c->flags & CONN_HAS_PASSIVE_QPN) != 0;
			theirs = c->active_qpn;
			has_theirs = 1;
		}
	}
	if (kind == CM_REP) {
		mine = p->cm_qpn;
		has_mine = p->has_cm_qpn;
	} else if (kind == CM_DREQ) {
		theirs = p->cm_qpn;
		has_theirs = p->has_cm_qpn;
	}
	if (has_mine) {
		p->lqpn = mine & 0xffffff;
		p->present |= BIT(F_LQPN);
	}
	if (has_theirs) {
		p->dqpn = theirs & 0xffffff;
		p->present |= BIT(F_DQPN);
	}
	return side;
}

// Applies an allowed CM message to the table (rdx_acl::cm::CmTable::commit). Returns the
// counter to bump (S_CM_CREATED, S_CM_TABLE_FULL, S_CM_REMOVED) or 0.
static __noinline int cm_commit(const struct acl_pkt *p, const struct acl_conn_key *key)
{
	__u8 kind = p->cm_type;
	if (kind == CM_REQ) {
		if (!p->has_cm_qpn)
			return 0;
		// A REQ for a connection already held (a retransmission or a replay) changes
		// nothing: resetting it would undo the allowed REP and RTU.
		if (bpf_map_lookup_elem(&acl_cm, key))
			return 0;
		struct acl_conn c = {};
		c.active_hi = key->ep_hi;
		c.active_lo = key->ep_lo;
		c.passive_kind = dst_endpoint(p, &c.passive_hi, &c.passive_lo);
		c.active_comm = key->comm_id;
		c.active_qpn = p->cm_qpn;
		if (bpf_map_update_elem(&acl_cm, key, &c, BPF_NOEXIST) == 0)
			return S_CM_CREATED;
		return S_CM_TABLE_FULL;
	}
	if (kind == CM_REJ || kind == CM_DREP)
		return bpf_map_delete_elem(&acl_cm, key) == 0 ? S_CM_REMOVED : 0;
	struct acl_conn *c = bpf_map_lookup_elem(&acl_cm, key);
	if (!c)
		return 0;
	if (kind == CM_REP) {
		c->passive_comm = p->cm_local;
		c->flags |= CONN_HAS_PASSIVE_COMM;
		if (p->has_cm_qpn) {
			c->passive_qpn = p->cm_qpn;
			c->flags |= CONN_HAS_PASSIVE_QPN;
		}
	} else if (kind == CM_RTU) {
		c->flags |= CONN_ESTABLISHED;
	}
	return 0;
}

// Comparisons without branches. The verifier follows every path and keeps no liveness, so a
// rule check built from branches would be explored once per combination of outcomes
// (2^n paths); built from arithmetic it is one path. The empty asm statements keep the
// compiler from turning the arithmetic back into compare-and-branch.

// 1 if x < y (unsigned 64-bit): the borrow out of x - y.
static __always_inline __u64 lt64(__u64 x, __u64 y)
{
	__u64 d = x - y;
	asm volatile("" : "+r"(d));
	__u64 t = (~x & y) | (~(x ^ y) & d);
	asm volatile("" : "+r"(t));
	return t >> 63;
}

// 1 if x <= y.
static __always_inline __u64 le64(__u64 x, __u64 y)
{
	return lt64(y, x) ^ 1;
}

// 1 if x == y.
static __always_inline __u64 eq64(__u64 x, __u64 y)
{
	__u64 d = x ^ y;
	asm volatile("" : "+r"(d));
	__u64 t = d | (0 - d);
	asm volatile("" : "+r"(t));
	return (t >> 63) ^ 1;
}

// a <= b for 128-bit values given as (high, low) halves.
static __always_inline __u64 le128(__u64 ahi, __u64 alo, __u64 bhi, __u64 blo)
{
	return lt64(ahi, bhi) | (eq64(ahi, bhi) & le64(alo, blo));
}

static __always_inline __u64 in128(const struct acl_range128 *r, __u64 hi, __u64 lo)
{
	return le128(r->lo_hi, r->lo_lo, hi, lo) & le128(hi, lo, r->hi_hi, r->hi_lo);
}

static __always_inline __u64 in64(__u64 lo, __u64 v, __u64 hi)
{
	return le64(lo, v) & le64(v, hi);
}

// The opcode mask word holding `op`'s bit, chosen without a branch or a variable offset
// (the rule sits on the stack, where the verifier admits no variable offset).
static __always_inline __u64 opcode_word(const struct acl_rule *r, __u64 op)
{
	__u64 q = op >> 6;
	__u64 m0 = 0 - eq64(q, 0), m1 = 0 - eq64(q, 1), m2 = 0 - eq64(q, 2), m3 = 0 - eq64(q, 3);
	asm volatile("" : "+r"(m0), "+r"(m1), "+r"(m2), "+r"(m3));
	return (r->opcode_mask[0] & m0) | (r->opcode_mask[1] & m1) | (r->opcode_mask[2] & m2) |
	       (r->opcode_mask[3] & m3);
}

// A field of the rule holds for the packet: present and in range, or absent and allowed so.
#define FIELD_OK(f, test) ((((present >> (f)) & 1) & (test)) | ((((present >> (f)) & 1) ^ 1) & ((absent_ok >> (f)) & 1)))

static __always_inline __u64 rule_matches(const struct acl_rule *r, const struct acl_pkt *k)
{
	__u64 present = k->present;
	__u64 absent_ok = r->absent_ok;
	__u64 op = k->opcode;
	__u64 ok = FIELD_OK(F_OPCODE, (opcode_word(r, op) >> (op & 63)) & 1);
	// Each field is folded in before the next is computed: left to itself the compiler
	// would load every operand first and spill past the 512-byte stack.
#define AND_FIELD(f, test)                                                                  \
	do {                                                                                 \
		ok &= FIELD_OK(f, test);                                                     \
		asm volatile("" : "+r"(ok));                                                 \
	} while (0)
	AND_FIELD(F_DQPN, in64(r->dqpn_lo, k->dqpn, r->dqpn_hi));
	AND_FIELD(F_SIP, in128(&r->sip, k->sip_hi, k->sip_lo));
	AND_FIELD(F_DIP, in128(&r->dip, k->dip_hi, k->dip_lo));
	AND_FIELD(F_DPORT, in64(r->dport_lo, k->dport, r->dport_hi));
	AND_FIELD(F_SPORT, in64(r->sport_lo, k->sport, r->sport_hi));
	AND_FIELD(F_VA, in64(r->va_lo, k->va, r->va_hi));
	AND_FIELD(F_CM_TYPE, ((__u64)r->cm_type_mask >> (k->cm_type & 15)) & 1);
	AND_FIELD(F_LQPN, in64(r->lqpn_lo, k->lqpn, r->lqpn_hi));
	AND_FIELD(F_CM_FORGED, ((__u64)r->forged_mask >> (k->forged & 1)) & 1);
	AND_FIELD(F_SLID, in64(r->slid_lo, k->slid, r->slid_hi));
	AND_FIELD(F_DLID, in64(r->dlid_lo, k->dlid, r->dlid_hi));
	AND_FIELD(F_SGID, in128(&r->sgid, k->sgid_hi, k->sgid_lo));
	AND_FIELD(F_DGID, in128(&r->dgid, k->dgid_hi, k->dgid_lo));
	return ok;
}

#define NONE 0xffffffffu
#define ERR 0xfffffffeu

static __always_inline const struct acl_words *word_rec(__u32 w)
{
	__u32 key = w >> 4;
	return bpf_map_lookup_elem(&acl_words, &key);
}

// (hi, lo) >> s for s in 0..=255.
static __always_inline void shr128(__u64 hi, __u64 lo, __u32 s, __u64 *oh, __u64 *ol)
{
	if (s >= 128) {
		*oh = 0;
		*ol = 0;
	} else if (s >= 64) {
		*oh = 0;
		*ol = hi >> (s & 63);
	} else if (s == 0) {
		*oh = hi;
		*ol = lo;
	} else {
		*oh = hi >> (s & 63);
		*ol = (lo >> (s & 63)) | (hi << ((64 - s) & 63));
	}
}

// Which child of node `n` (8 words) the packet goes to (tree.rs, Node::child_of).
static __always_inline __u32 child_of(const __u32 *n, const struct acl_thread *th)
{
	__u32 meta = n[5];
	__u32 field = meta & 15;
	__u32 bits = (meta >> 8) & 15;
	__u32 shift = (meta >> 16) & 255;
	__u32 whole = meta >> 24;
	if (!((th->p.present >> field) & 1))
		return (1u << bits) + 1;
	__u64 hi = th->vals[field][0], lo = th->vals[field][1];
	__u64 vh, vl;
	if (!whole) {
		shr128(hi, lo, shift + bits, &vh, &vl);
		__u64 ph = ((__u64)n[3] << 32) | n[2], pl = ((__u64)n[1] << 32) | n[0];
		if (vh != ph || vl != pl)
			return 1u << bits;
	}
	shr128(hi, lo, shift, &vh, &vl);
	return vl & ((1u << bits) - 1);
}

// Walks tree `g` of tier `t` to its leaf; returns the leaf reference without its bit 31 (an
// index, or ACL_INLINE_LEAF with the first entry and length) or ERR.
static __noinline __u32 leaf_of(__u32 t, __u32 g, const struct acl_thread *th)
{
	const struct acl_tier *tl = &acl_ctl.tier[t & 1];
	__u32 r = tl->roots[g & (ACL_MAX_GROUPS - 1)];
	__u32 nodes = tl->nodes, refs = tl->refs;
	for (int d = 0; d < ACL_MAX_DEPTH; d++) {
		if (r & ACL_LEAF_REF)
			return r & ~ACL_LEAF_REF;
		__u32 w = nodes + r * 8;
		const struct acl_words *rec = word_rec(w);
		if (!rec)
			return ERR;
		const __u32 *n = &rec->w[w & 8];
		__u32 c = refs + n[4] + child_of(n, th);
		const struct acl_words *cr = word_rec(c);
		if (!cr)
			return ERR;
		r = cr->w[c & 15];
	}
	return ERR;
}

// 0 if the entry's opcode, queue-pair, port and VA checks already fail (its rule cannot
// match); the scan then skips it before the address checks (`entry_verdict`). A branch per
// test, leaving at the first that fails: most entries fail one of the first tests, and every
// failure is the scan's `continue`, so the paths meet again at its loop head and the verifier
// follows one per test, not one per combination. (The branch-free form, arithmetic on
// borrows as in `rule_matches`, computed every test of every entry: 1.2x slower scans.)
static __always_inline int entry_quick(const struct acl_entry *e, const struct acl_pkt *k)
{
	__u32 present = k->present;
	__u32 absent_ok = e->absent_ok;
	__u32 missing = ~present & ((1u << (F_CM_FORGED + 1)) - 1);
	// A field the packet lacks passes only where the rule allows it absent.
	if (missing & ~absent_ok & (BIT(F_OPCODE) | BIT(F_DQPN) | BIT(F_SPORT) | BIT(F_DPORT) |
				    BIT(F_VA)))
		return 0;
	__u32 op = k->opcode;
	if ((present & BIT(F_OPCODE)) && op < 64 && !((e->opcodes >> op) & 1))
		return 0;
	if (present & BIT(F_DQPN)) {
		__u32 q = k->dqpn;
		if (q < e->dqpn_lo || q > e->dqpn_hi)
			return 0;
	}
	if (present & BIT(F_SPORT)) {
		__u32 v = k->sport;
		if (v < e->sport_lo || v > e->sport_hi)
			return 0;
	}
	if (present & BIT(F_DPORT)) {
		__u32 v = k->dport;
		if (v < e->dport_lo || v > e->dport_hi)
			return 0;
	}
	if (present & BIT(F_VA)) {
		__u64 va = k->va;
		if (va < e->va_lo || va > e->va_hi)
			return 0;
	}
	return 1;
}

// 1 if an address field fails a compact entry's check (tree.rs, Compact::verdict): the entry
// holds an IPv4 range (its low 32 bits) and the address is not IPv4-mapped or lies outside.
// An entry for `any` passes; one whose range is not IPv4 passes here and is inexact.
static __always_inline int addr_fails(__u32 flags, __u32 v4, __u32 any, __u64 hi, __u64 lo,
				      __u32 elo, __u32 ehi)
{
	if ((flags & any) || !(flags & v4))
		return 0;
	if (hi != 0 || (lo >> 32) != 0xffff)
		return 1;
	__u32 low = lo;
	return low < elo || low > ehi;
}

// For an entry whose `entry_quick` checks passed: 0: the entry's rule does not match; 1: it
// matches; 2: the full rule must decide. The address checks, and whether the compact check
// is exact.
static __always_inline int entry_verdict(const struct acl_entry *e, const struct acl_pkt *k)
{
	__u32 present = k->present;
	__u32 absent_ok = e->absent_ok;
	__u32 flags = e->flags;
	if (present & BIT(F_SIP)) {
		if (addr_fails(flags, E_SIP_V4, E_SIP_ANY, k->sip_hi, k->sip_lo, e->sip_lo, e->sip_hi))
			return 0;
	} else if (!(absent_ok & BIT(F_SIP))) {
		return 0;
	}
	if (present & BIT(F_DIP)) {
		if (addr_fails(flags, E_DIP_V4, E_DIP_ANY, k->dip_hi, k->dip_lo, e->dip_lo, e->dip_hi))
			return 0;
	} else if (!(absent_ok & BIT(F_DIP))) {
		return 0;
	}
	if ((flags & E_INEXACT) || ((present & BIT(F_OPCODE)) && k->opcode >= 64))
		return 2;
	return 1;
}

// Whether rule `prio` matches (its full check).
static __noinline __u64 full_match(__u32 prio, const struct acl_pkt *k)
{
	if (prio >= acl_ctl.rule_count)
		return 0;
	__u32 key = acl_ctl.rules + prio;
	const struct acl_rule *r = bpf_map_lookup_elem(&acl_rules, &key);
	if (!r)
		return 0;
	return rule_matches(r, k);
}

#define SCAN_DONE 0
#define SCAN_FULL 1
#define SCAN_ERR 2
#define SCAN(status, at, prio) (((__u64)(at) << 34) | ((__u64)(status) << 32) | (prio))

// Scans leaf `leaf` of tier `t` from entry `from` for the first entry that comes before
// `best` and matches: SCAN_DONE with that priority (or `best`), or SCAN_FULL with the entry's
// index and priority when only its full rule can decide (checked by the caller: a full check
// here would stack its frame on this one's), or SCAN_ERR for an inconsistent image.
static __noinline __u64 scan_leaf(__u32 t, __u32 leaf, __u32 from, __u32 best,
				  const struct acl_thread *th)
{
	const struct acl_tier *tl = &acl_ctl.tier[t & 1];
	__u32 start, len;
	if (leaf & ACL_INLINE_LEAF) {
		start = leaf & 0xfffff;
		len = (leaf >> 20) & 0x3ff;
	} else {
		__u32 lw = tl->leaves + 2 * leaf;
		const struct acl_words *rec = word_rec(lw);
		if (!rec)
			return SCAN(SCAN_ERR, 0, 0);
		start = rec->w[lw & 14];
		len = rec->w[(lw & 14) + 1];
	}
	__u32 base = tl->entries + start;
	for (__u32 i = from; i < ACL_MAX_LEAF; i++) {
		if (i >= len)
			break;
		__u32 key = base + i;
		const struct acl_entry *e = bpf_map_lookup_elem(&acl_entries, &key);
		if (!e)
			return SCAN(SCAN_ERR, 0, 0);
		__u32 prio = e->priority;
		if (prio >= best)
			break;
		if (!entry_quick(e, &th->p))
			continue;
		int v = entry_verdict(e, &th->p);
		if (v == 1)
			return SCAN(SCAN_DONE, 0, prio);
		if (v == 2)
			return SCAN(SCAN_FULL, i, prio);
	}
	return SCAN(SCAN_DONE, 0, best);
}

// The deciding rule: the first tier with a match, the smallest priority over its trees.
// Every tree of a tier is walked before any leaf is scanned: the walks are independent, so
// their cache misses can overlap.
static __always_inline __u32 classify(struct acl_thread *th)
{
	__u32 tiers = acl_ctl.tiers;
	for (__u32 t = 0; t < 2; t++) {
		if (t >= tiers)
			break;
		__u32 groups = acl_ctl.tier[t].groups;
		__u32 best = NONE;
		for (__u32 g = 0; g < ACL_MAX_GROUPS; g++) {
			if (g >= groups)
				break;
			__u32 leaf = leaf_of(t, g, th);
			if (leaf == ERR)
				return ERR;
			// An opaque copy of the index: clang would otherwise step a pointer across
			// iterations, which the verifier's widened loop head drops (reported as an
			// uninitialised register).
			__u32 j = g;
			asm volatile("" : "+r"(j));
			th->leaves[j & (ACL_MAX_GROUPS - 1)] = leaf;
		}
		for (__u32 g = 0; g < ACL_MAX_GROUPS; g++) {
			if (g >= groups)
				break;
			__u32 leaf = th->leaves[g & (ACL_MAX_GROUPS - 1)];
			__u32 from = 0;
			for (__u32 k = 0; k < ACL_MAX_LEAF; k++) {
				__u64 r = scan_leaf(t, leaf, from, best, th);
				__u32 status = (r >> 32) & 3;
				__u32 prio = (__u32)r;
				if (status == SCAN_DONE) {
					best = prio;
					break;
				}
				if (status != SCAN_FULL)
					return ERR;
				if (full_match(prio, &th->p)) {
					best = prio;
					break;
				}
				from = (r >> 34) + 1;
			}
		}
		if (best != NONE)
			return best;
	}
	return NONE;
}

// The hot-flow slot of a match key: four products of three words each rather than one
// product per word (12 multiplies, each with its own 64-bit constant). The words are folded
// in groups chosen so that none holds a word with its copy (a RoCEv2 key repeats sip/dip in
// sgid/dgid, which an xor would cancel).
static __always_inline __u64 hot_hash(const __u64 *k)
{
	__u64 a = (k[1] ^ k[4] ^ k[8]) * 0x9e3779b97f4a7c15ull;
	__u64 b = (k[3] ^ k[6] ^ k[11]) * 0xc2b2ae3d27d4eb4full;
	__u64 c = (k[9] ^ k[0] ^ k[5]) * 0x165667b19e3779f9ull;
	__u64 d = (k[10] ^ k[2] ^ k[7]) * 0xd6e8feb86659fd93ull;
	__u64 h = a + b + c + d;
	return (h ^ (h >> 29)) >> 54;
}

// The match fields by field index, for the tree walk.
static __always_inline void fill_vals(struct acl_thread *th)
{
	const struct acl_pkt *p = &th->p;
	th->vals[F_SIP][0] = p->sip_hi;
	th->vals[F_SIP][1] = p->sip_lo;
	th->vals[F_DIP][0] = p->dip_hi;
	th->vals[F_DIP][1] = p->dip_lo;
	th->vals[F_SGID][0] = p->sgid_hi;
	th->vals[F_SGID][1] = p->sgid_lo;
	th->vals[F_DGID][0] = p->dgid_hi;
	th->vals[F_DGID][1] = p->dgid_lo;
	th->vals[F_SPORT][1] = p->sport;
	th->vals[F_DPORT][1] = p->dport;
	th->vals[F_SLID][1] = p->slid;
	th->vals[F_DLID][1] = p->dlid;
	th->vals[F_LQPN][1] = p->lqpn;
	th->vals[F_DQPN][1] = p->dqpn;
	th->vals[F_VA][1] = p->va;
}

SEC("rdx/acl_packet")
int acl_enforce(struct acl_ctx *ctx)
{
	__u32 zero = 0;
	// One per-thread lookup: the counters and the parse result live in the thread's value.
	// The parse result lives there, not on the stack: its contents are unknown to the
	// verifier, so the many parser paths reach the classifier in one state (on the stack
	// every path would carry its own constants and be verified separately).
	struct acl_thread *th = bpf_map_lookup_elem(&acl_scratch, &zero);
	struct acl_conn_key key = {};
	int parsed;

	// One store per field: the EIM grants fields, not ranges, so a store the compiler
	// merges across two adjacent fields is refused (ctx-access).
	*(volatile __u32 *)&ctx->rule = 0xffffffff;
	*(volatile __u32 *)&ctx->policy = 0xffffffff;
	*(volatile __u32 *)&ctx->reason = 0;
	ctx->generation = acl_ctl.generation;
	if (!th) {
		ctx->cause = ACL_CAUSE_MALFORMED;
		return 1;
	}
	struct acl_stats *st = &th->st;
	st->n[S_PACKETS]++;
	struct acl_pkt *p = &th->p;
	int side = SIDE_NONE;
	if (ctx->link != 0 || !parse_fast(ctx, p)) {
		__builtin_memset(p, 0, sizeof(*p));
		// Parsing runs in stages, each a function called from here that takes its starting
		// offset from the scratch value: the verifier then checks each stage once, instead
		// of once per combination of the earlier stages' header layouts.
		if (ctx->link == 0)
			parsed = parse_ethernet(ctx, p);
		else
			parsed = parse_infiniband(ctx, p);
		if (parsed == P_RDMA)
			parsed = parse_transport(ctx, p);
		if (parsed == P_RDMA && p->has_mad)
			parsed = parse_cm_mad(ctx, p);
		if (parsed == P_UNINSPECTED) {
			ctx->cause = ACL_CAUSE_DEFAULT;
			st->n[S_UNINSPECTED]++;
			st->n[S_DEFAULT]++;
			if (acl_ctl.default_deny) {
				st->n[S_DENIED]++;
				return 1;
			}
			st->n[S_ALLOWED]++;
			return 0;
		}
		if (parsed == P_NOT_RDMA) {
			ctx->cause = ACL_CAUSE_NOT_RDMA;
			st->n[S_NOT_RDMA]++;
			st->n[S_ALLOWED]++;
			return 0;
		}
		if (parsed != P_RDMA) {
			__u32 reason = parsed - P_MALFORMED;
			if (reason >= M_COUNT)
				reason = M_COUNT - 1;
			ctx->cause = ACL_CAUSE_MALFORMED;
			ctx->reason = reason;
			st->n[S_MALFORMED + reason]++;
			st->n[S_DENIED]++;
			return 1;
		}
		p->present |= BIT(F_OPCODE);
		if (p->is_cm) {
			p->present |= BIT(F_CM_TYPE) | BIT(F_CM_FORGED);
			side = cm_resolve(p, &key, st);
		} else {
			p->dqpn = p->dest_qp & 0xffffff;
			p->present |= BIT(F_DQPN);
		}
	}

	// The hot-flow table first: the whole match key and this version's tag must agree.
	const __u64 *k = (const __u64 *)p;
	__u64 tag = acl_ctl.tag;
	struct acl_hot *h = &th->hot[hot_hash(k) & (ACL_HOT - 1)];
	__u64 diff = h->tag ^ tag;
#pragma clang loop unroll(full)
	for (int i = 0; i < 12; i++)
		diff |= h->key[i] ^ k[i];
	__u32 hit, policy, action;
	if (diff == 0) {
		hit = h->rule;
		policy = h->policy;
		action = h->action;
	} else {
		fill_vals(th);
		hit = classify(th);
		if (hit == ERR)
			return 1; // an inconsistent image: fail closed, cause left unset
		policy = NONE;
		action = acl_ctl.default_deny;
		if (hit != NONE) {
			// A rule index past the rule count is an inconsistent image: fail closed.
			if (hit >= acl_ctl.rule_count)
				return 1;
			__u32 rk = acl_ctl.rules + hit;
			const __u64 *d = bpf_map_lookup_elem(&acl_decisions, &rk);
			if (!d)
				return 1;
			policy = *d >> 8;
			// Only a slot a control plane wrote as "allow" allows: an unwritten slot (the
			// map starts zeroed, and action 0 is allow) or any other value denies.
			action = (*d & 0xff) != ACL_DECISION_ALLOW;
		}
#pragma clang loop unroll(full)
		for (int i = 0; i < 12; i++)
			h->key[i] = k[i];
		h->tag = tag;
		h->rule = hit;
		h->policy = policy;
		h->action = action;
	}

	if (hit != NONE) {
		ctx->rule = hit;
		ctx->policy = policy;
		ctx->cause = ACL_CAUSE_RULE;
	} else {
		ctx->cause = ACL_CAUSE_DEFAULT;
		st->n[S_DEFAULT]++;
	}
	if (action == 0) {
		st->n[S_ALLOWED]++;
		if (p->is_cm && side != SIDE_NONE) {
			__u32 bump = cm_commit(p, &key);
			if (bump && bump < S_COUNT)
				st->n[bump]++;
		}
		return 0;
	}
	st->n[S_DENIED]++;
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
