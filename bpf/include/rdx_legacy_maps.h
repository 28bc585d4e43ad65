/* The pre-BTF map declaration that libbpf 1.x headers dropped: a `struct bpf_map_def` placed
 * in the `maps` section. rdx still loads objects written this way. */
#ifndef RDX_LEGACY_MAPS_H
#define RDX_LEGACY_MAPS_H

#include <linux/types.h>

struct bpf_map_def {
	__u32 type;
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries;
	__u32 map_flags;
};

#endif
