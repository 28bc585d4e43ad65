//! `rdx-fleet`: collective CodeFlow — one transactional update across many nodes and hooks
//! (broadcast), its plan file, the update records it keeps in every node's region, its local
//! intent log and recovery.
//!
//! It owns the broadcast protocol: prepare every artifact on every node through
//! [`rdx_control::CodeFlow`] (nothing visible), hold every affected hook slot, flip every
//! slot, release the holds in the plan's dependency order; and `recover`, which finishes or
//! undoes a broadcast or migration whose control plane died at any phase, from the records
//! the nodes hold (any machine, any state directory; the local intent log names the nodes
//! when it is at hand). Each
//! step on a hook slot (hold, flip, release, the epoch wait, recovering a slot) is
//! [`rdx_transport::slot`]'s: this crate decides when, never how.
//!
//! It must not run anything in a node (every effect is a one-sided operation through the
//! node's transport, as in `rdx-control`), must not make anything visible before every
//! node is prepared and held, and must not hold a lock across nodes.

pub mod broadcast;
pub mod error;
pub mod intent;
pub mod migrate;
pub mod plan;
pub mod record;
pub mod recover;
pub mod watch;

pub use broadcast::{broadcast, CrashPoint, HookUpdate, Options, Report, Session};
pub use error::{FleetError, Result};
pub use plan::Plan;
pub use recover::{recover, RecoverOptions, Recovery};
