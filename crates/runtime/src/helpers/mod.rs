//! The helpers extension code calls, published in the helper table and the context table at
//! `ctx_init`: the implementations of the entries of the ABI's helper table
//! ([`rdx_region::helpers`]) bound by [`Binders::RUNTIME`].
//!
//! Helpers find their runtime through the calling thread's state (set by the hook that is
//! running) and reach maps through the address the linker baked into the code (`map:<i>`,
//! the map object's header). Map operations run the same code a control plane runs
//! remotely ([`rdx_transport::xstate`]), over this process's mapping.

mod maps;
mod misc;
mod trace;

use rdx_region::abi::HelperFn;
use rdx_region::helpers::{Binders, HelperId};

/// The runtime's implementation of helper `id`, as hook code calls it: every entry of the
/// helper table ([`rdx_region::helpers`]) bound by [`Binders::RUNTIME`], and no other.
pub fn hook_helper(id: HelperId) -> Option<HelperFn> {
    Some(match id {
        HelperId::MAP_LOOKUP_ELEM => maps::map_lookup_elem,
        HelperId::MAP_UPDATE_ELEM => maps::map_update_elem,
        HelperId::MAP_DELETE_ELEM => maps::map_delete_elem,
        HelperId::KTIME_GET_NS => misc::ktime_get_ns,
        HelperId::TRACE_PRINTK => trace::trace_printk,
        HelperId::GET_PRANDOM_U32 => misc::get_prandom_u32,
        HelperId::GET_SMP_PROCESSOR_ID => misc::get_smp_processor_id,
        HelperId::TAIL_CALL => maps::tail_call,
        HelperId::RINGBUF_OUTPUT => maps::ringbuf_output,
        HelperId::RINGBUF_RESERVE => maps::ringbuf_reserve,
        HelperId::RINGBUF_SUBMIT => maps::ringbuf_submit,
        HelperId::RINGBUF_DISCARD => maps::ringbuf_discard,
        _ => return None,
    })
}

/// Every helper a runtime publishes at `ctx_init`, with its table entry.
pub(crate) fn published() -> impl Iterator<Item = (&'static rdx_region::helpers::Helper, HelperFn)>
{
    rdx_region::helpers::bound_by(Binders::RUNTIME).map(|h| {
        let f = hook_helper(h.id).unwrap_or_else(|| {
            panic!(
                "the runtime binds helper {} but has no implementation",
                h.name
            )
        });
        (h, f)
    })
}

/// Token with which host threads take map locks: top bit set, thread slot below. Control
/// planes use tokens with the top bit clear.
#[inline]
pub(crate) fn host_token(slot: u32) -> u64 {
    rdx_transport::xstate::TOKEN_HOST | slot as u64
}

pub(crate) const EINVAL: u64 = (-(libc::EINVAL as i64)) as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_exactly_the_runtime_entries_of_the_table() {
        let implemented: Vec<_> = (0..4096)
            .map(HelperId::new)
            .filter(|id| hook_helper(*id).is_some())
            .collect();
        let mut bound: Vec<_> = rdx_region::helpers::bound_by(Binders::RUNTIME)
            .map(|h| h.id)
            .collect();
        bound.sort();
        assert_eq!(implemented, bound);
        assert_eq!(published().count(), bound.len());
    }

    /// `docs/runtime.md` lists the published helpers with notes; its ids and names must be
    /// the table's.
    #[test]
    fn the_runtime_doc_lists_exactly_the_published_helpers() {
        let doc = include_str!("../../../../docs/runtime.md");
        let section = doc
            .split("\n## Helpers\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/runtime.md has a Helpers section");
        let mut listed = Vec::new();
        for row in section
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| id"))
        {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let mut ids = Vec::new();
            for part in cells[1].split(',').map(str::trim) {
                match part.split_once('–') {
                    Some((lo, hi)) => ids.extend(lo.parse::<u32>().unwrap()..=hi.parse().unwrap()),
                    None => ids.push(part.parse::<u32>().unwrap()),
                }
            }
            let names: Vec<&str> = cells[2].split('`').skip(1).step_by(2).collect();
            assert_eq!(ids.len(), names.len(), "{row}");
            listed.extend(ids.into_iter().zip(names));
        }
        let table: Vec<(u32, &str)> = rdx_region::helpers::bound_by(Binders::RUNTIME)
            .map(|h| (h.id.get(), h.name))
            .collect();
        assert_eq!(listed, table);
    }
}
