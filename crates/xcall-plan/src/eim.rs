//! EIM text for cross-sandbox calls: the function capabilities a caller's class holds and the
//! reply function an export's class holds. Both are ordinary EIM host functions, so the
//! verifier types them with the rules it already has:
//!
//! - `call` capability (one per service and entry): `target` constrained to exactly that
//!   entry's [`crate::Target`] value, `args` readable memory of `args_len` bytes bounded by the
//!   entry's declared size, `out` writable memory of `out_len` bytes;
//! - `xcall_reply(data, len)`: `data` readable memory of `len` bytes, bounded by the largest
//!   reply the export may send.
//!
//! A class that does not list a capability cannot call it: the verifier rejects the program.

use crate::{Target, REPLY_ID, REPLY_NAME};

/// One entry of an EIM spec's `functions:` list: the capability to call `target` through the
/// host function `id` (bound to `rdx_xcall::call::xcall_call` in the caller host).
pub fn call_function(name: &str, id: u32, target: Target, max_args: u32, max_out: u32) -> String {
    format!(
        "  - name: {name}\n\
         \x20   id: {id}\n\
         \x20   description: Calls slot {slot} entry {export} on this thread (cross-sandbox).\n\
         \x20   args:\n\
         \x20     - {{ name: target, kind: scalar, constraints: [\"target == {value}\"] }}\n\
         \x20     - {{ name: args, kind: mem_read, size_arg: args_len }}\n\
         \x20     - {{ name: args_len, kind: size, constraints: [\"args_len <= {max_args}\"] }}\n\
         \x20     - {{ name: out, kind: mem_write, size_arg: out_len }}\n\
         \x20     - {{ name: out_len, kind: size, constraints: [\"out_len <= {max_out}\"] }}\n",
        slot = target.slot,
        export = target.export,
        value = target.encode() as i64,
    )
}

/// The `xcall_reply` entry of an export's EIM `functions:` list.
pub fn reply_function(max_reply: u32) -> String {
    format!(
        "  - name: {REPLY_NAME}\n\
         \x20   id: {REPLY_ID}\n\
         \x20   description: Writes the result into the caller's output buffer.\n\
         \x20   args:\n\
         \x20     - {{ name: data, kind: mem_read, size_arg: len }}\n\
         \x20     - {{ name: len, kind: size, constraints: [\"len <= {max_reply}\"] }}\n"
    )
}
