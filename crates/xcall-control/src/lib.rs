//! `rdx-xcall-control`: the control-plane side of cross-sandbox direct calls, deploying an
//! exported entry of a sandbox that joined an address plan (`rdx-xcall-plan`).
//!
//! What it must not do: link the data-plane runtime or the host side of calls (`rdx-xcall`);
//! which helpers a callee may call comes from the ABI's helper table
//! ([`rdx_xcall_plan::callee_may_call`]), not from the host's implementations.
//!
//! Deploying is the normal CodeFlow path with two differences. The code is compiled to reach
//! helpers through the region's helper table (`HelperCalls::Table`) instead of by absolute
//! address, because it will run in other processes whose helper implementations live elsewhere; and
//! the program may call only the helpers that have a cross-sandbox meaning
//! ([`callee_may_call`]). Publication, versions, rollback and reclamation are CodeFlow's: the
//! entry's code lives in the hook of the same name, and callers in other processes hold
//! thread slots in the callee's region, so reclamation waits for them too.

use rdx_bpf::isa::{CallTarget, Insn};
use rdx_control::{CodeFlow, ControlError, Extension, Published};
use rdx_region::helpers::HelperId;
use rdx_xcall_plan::{callee_helper_ids, callee_may_call};

/// Why an exported entry was not deployed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// CodeFlow refused it (verification, compilation or publication).
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The program calls a helper that has no cross-sandbox meaning.
    #[error(
        "instruction {pc}: helper {id} is not available to cross-sandbox callees (allowed: {:?})",
        callee_helper_ids()
    )]
    UnsupportedHelper {
        /// Index of the call instruction.
        pc: usize,
        /// The helper id it calls.
        id: i64,
    },
    /// The program calls through a register (`callx`).
    #[error("instruction {pc}: callx is not available to cross-sandbox callees")]
    IndirectCall {
        /// Index of the call instruction.
        pc: usize,
    },
    /// The EIM spec lets the program read more context than callers pass.
    #[error("export {entry:?}: the EIM spec gives its context {eim} bytes, the sandbox declares {declared} bytes of arguments")]
    ContextTooLarge {
        /// The export.
        entry: String,
        /// Context bytes the EIM hook declares.
        eim: u64,
        /// Argument bytes the sandbox declared for the export.
        declared: u64,
    },
}

/// Checks that `insns` only call helpers a callee may use.
pub fn check_callee_helpers(insns: &[Insn]) -> Result<(), DeployError> {
    for (pc, insn) in insns.iter().enumerate() {
        match insn {
            Insn::Call(CallTarget::Helper(id))
                if !HelperId::from_imm(*id).is_some_and(callee_may_call) =>
            {
                return Err(DeployError::UnsupportedHelper { pc, id: *id as i64 })
            }
            Insn::Call(CallTarget::Reg(_)) => return Err(DeployError::IndirectCall { pc }),
            _ => {}
        }
    }
    Ok(())
}

/// Verifies `ext` against the export's hook and class in the service's EIM spec, compiles it
/// for helper-table calls and publishes it as the export's new version (one CAS). A caller
/// mid-call finishes on the version it started; reclaim old versions with
/// [`CodeFlow::reclaim`], which waits for every caller's epoch.
pub fn deploy_export(
    cf: &mut CodeFlow,
    entry: &str,
    ext: &Extension,
    class: Option<&str>,
) -> Result<Published, DeployError> {
    // The callee is verified against the EIM hook's context size, and at run time reads the
    // caller's buffer of the size the sandbox declared for the export (the hook's context
    // size in the region): the first must not exceed the second.
    let declared = cf.view().hook(entry)?.ctx_size;
    let eim_size = cf
        .eim()
        .and_then(|e| e.hooks.iter().find(|h| h.name == entry))
        .map(|h| h.context.size as u64);
    if let Some(size) = eim_size.filter(|s| *s > declared) {
        return Err(DeployError::ContextTooLarge {
            entry: entry.into(),
            eim: size,
            declared,
        });
    }
    let checked = cf.validate_code(ext, entry, class)?;
    check_callee_helpers(ext.insns())?;
    let compiled = cf.jit_compile_helper_table(ext, &checked)?;
    Ok(cf.deploy_prog(entry, ext, &compiled)?)
}
