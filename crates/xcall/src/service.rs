//! Joining the plan as a sandbox: the host's region at its slot's address, and its exports.
//!
//! Every sandbox of a merged address space joins this way, callers included (a caller
//! simply exports nothing): its region then sits at an address no other sandbox's region
//! can take, so any process can map any other sandbox's region at the same address.

use crate::XcallError;
use rdx_runtime::{HookSpec, Runtime, RuntimeBuilder};
use rdx_xcall_plan::plan::{ExportInfo, Plan, EXPORT_SERIALIZED};
use rdx_xcall_plan::{MAX_ARGS, MAX_EXPORTS, REPLY_ID, REPLY_NAME};

/// An entry to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportDecl {
    /// Name of the entry (and of the hook that holds its code in the region).
    pub name: String,
    /// Bytes of argument buffer the entry reads: its context size.
    pub max_args: u32,
    /// At most one caller runs it at a time, across every process.
    pub serialized: bool,
}

/// Configures a sandbox joining a plan.
#[derive(Debug)]
pub struct ServiceBuilder<'p> {
    plan: &'p Plan,
    name: String,
    slot: Option<u16>,
    exports: Vec<ExportDecl>,
    runtime: RuntimeBuilder,
}

impl<'p> ServiceBuilder<'p> {
    /// Claims this slot (or fails if a live sandbox holds it); default: the first free one.
    pub fn slot(mut self, slot: u16) -> Self {
        self.slot = Some(slot);
        self
    }

    /// Exports `name`, reading `max_args` bytes of arguments.
    pub fn export(mut self, name: &str, max_args: u32) -> Self {
        self.exports.push(ExportDecl {
            name: name.into(),
            max_args,
            serialized: false,
        });
        self
    }

    /// Exports a serialised entry (one caller at a time).
    pub fn export_serialized(mut self, name: &str, max_args: u32) -> Self {
        self.exports.push(ExportDecl {
            name: name.into(),
            max_args,
            serialized: true,
        });
        self
    }

    /// The runtime configuration (EIM spec, capacities, the host's own hooks). Its base
    /// address is set by the plan.
    pub fn runtime(mut self, runtime: RuntimeBuilder) -> Self {
        self.runtime = runtime;
        self
    }

    /// Claims the slot, creates the region at the slot's address, declares one hook per
    /// export, registers `xcall_reply`, and publishes the sandbox in the plan.
    pub fn build(self) -> Result<Service, XcallError> {
        if self.exports.len() > MAX_EXPORTS {
            return Err(XcallError::BadExport {
                name: self.exports[MAX_EXPORTS].name.clone(),
                reason: format!("a sandbox exports at most {MAX_EXPORTS} entries"),
            });
        }
        for (i, x) in self.exports.iter().enumerate() {
            if x.max_args == 0 || x.max_args > MAX_ARGS {
                return Err(XcallError::BadExport {
                    name: x.name.clone(),
                    reason: format!("argument size {} (1..={MAX_ARGS})", x.max_args),
                });
            }
            if self.exports[..i].iter().any(|y| y.name == x.name) {
                return Err(XcallError::BadExport {
                    name: x.name.clone(),
                    reason: "exported twice".into(),
                });
            }
        }
        let slot = self.plan.claim(self.slot)?;
        let built = (|| {
            let addr = self.plan.slot_address(slot)?;
            let rt = self.runtime.base_address(addr).build()?;
            let size = rt.info().region_size;
            if size > self.plan.spec().slot_size {
                return Err(XcallError::RegionTooLarge {
                    slot,
                    size,
                    slot_size: self.plan.spec().slot_size,
                });
            }
            let mut exports = Vec::new();
            for (i, x) in self.exports.iter().enumerate() {
                let hook = rt.declare_hook(&x.name, HookSpec::new(x.max_args as u64))?;
                exports.push(ExportInfo {
                    index: i as u16,
                    name: x.name.clone(),
                    hook_index: hook.index(),
                    max_args: x.max_args,
                    flags: if x.serialized { EXPORT_SERIALIZED } else { 0 },
                });
            }
            rt.register_function(REPLY_NAME, REPLY_ID, crate::callee::reply)?;
            rt.register()?;
            self.plan
                .publish(slot, &self.name, rt.path(), size, &exports)?;
            Ok((rt, exports))
        })();
        match built {
            Ok((runtime, exports)) => Ok(Service {
                plan: *self.plan,
                slot,
                name: self.name,
                runtime,
                exports,
            }),
            Err(e) => {
                self.plan.release(slot);
                Err(e)
            }
        }
    }
}

/// A sandbox that joined a plan. Dropping it frees its slot in the plan (the region stays
/// until the runtime's last handle is gone).
pub struct Service {
    plan: Plan,
    slot: u16,
    name: String,
    runtime: Runtime,
    exports: Vec<ExportInfo>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("name", &self.name)
            .field("slot", &self.slot)
            .finish()
    }
}

impl Service {
    /// A builder for the sandbox `name` in `plan` (its region placed at its slot's address).
    pub fn builder<'p>(plan: &'p Plan, name: &str) -> ServiceBuilder<'p> {
        ServiceBuilder {
            plan,
            name: name.into(),
            slot: None,
            exports: Vec::new(),
            runtime: Runtime::builder(),
        }
    }

    /// The sandbox's slot in the plan.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The sandbox's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its runtime: declare hooks and register functions through it.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Its exports.
    pub fn exports(&self) -> &[ExportInfo] {
        &self.exports
    }

    /// The target of one of this sandbox's exports.
    pub fn target(&self, entry: &str) -> Option<rdx_xcall_plan::Target> {
        self.exports
            .iter()
            .find(|x| x.name == entry)
            .map(|x| rdx_xcall_plan::Target::new(self.slot, x.index))
    }

    /// The control-plane address of this sandbox's region (`shm:<path>`).
    pub fn address(&self) -> String {
        format!("shm:{}", self.runtime.path().display())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.plan.release(self.slot);
    }
}
