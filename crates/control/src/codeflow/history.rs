//! The deployment history a CodeFlow writes itself ([`CodeFlow::record_history`]): every
//! publication, rollback and detach, whoever drives the CodeFlow (the command line, fleet,
//! xcall, an embedding program). A failure to record never undoes what took effect on the
//! node: it is reported as [`crate::ControlError::NotRecorded`].

use super::CodeFlow;
use crate::error::{ControlError, Result};
use crate::lease;
use crate::registry::{HistoryAction, HistoryEntry, Registry};
use crate::tier::Tier;

impl CodeFlow {
    /// Records every version this CodeFlow publishes, rolls back to or detaches from now
    /// on in `registry`'s history under node name `node`. A deploy through any path —
    /// [`CodeFlow::deploy`], [`CodeFlow::tx`], a fleet broadcast, an embedding program —
    /// leaves its entry; when the registry cannot record it, the operation (which took
    /// effect on the node) ends with [`ControlError::NotRecorded`].
    pub fn record_history(&mut self, registry: Registry, node: impl Into<String>) {
        self.history = Some((registry, node.into()));
    }

    /// Writes `entries` (each with the tier of the version it names) to the history, if
    /// one is attached. `done` says what took effect, for the error when it cannot.
    pub(super) fn record(
        &self,
        entries: impl IntoIterator<Item = (HistoryEntry, Option<Tier>)>,
        done: impl FnOnce() -> String,
    ) -> Result<()> {
        let Some((registry, _)) = &self.history else {
            return Ok(());
        };
        let recorded = entries
            .into_iter()
            .try_for_each(|(e, tier)| registry.record_with_tier(&e, tier).map(drop));
        recorded.map_err(|source| ControlError::NotRecorded {
            done: done(),
            source: Box::new(source),
        })
    }

    /// A history entry of this node for `hook` (empty program fields, now).
    pub(super) fn history_entry(&self, hook: &str, action: HistoryAction) -> HistoryEntry {
        HistoryEntry {
            id: 0,
            node: self
                .history
                .as_ref()
                .map(|(_, node)| node.clone())
                .unwrap_or_default(),
            hook: hook.into(),
            action,
            version: 0,
            previous_version: 0,
            program: String::new(),
            object: String::new(),
            class: String::new(),
            artifact: String::new(),
            at_ms: lease::now_ms(),
            generation: 0,
        }
    }

    /// Records a rollback to `version` with the program, object, class and artifact of the
    /// deploy that first published it, as the history holds them.
    pub(super) fn record_rollback(
        &self,
        hook: &str,
        version: u32,
        previous_version: u32,
        generation: u64,
    ) -> Result<()> {
        let Some((registry, node)) = &self.history else {
            return Ok(());
        };
        let done = || format!("hook {hook:?} rolled back to version {version}");
        let deployed = registry
            .history(node, Some(hook))
            .map_err(|source| ControlError::NotRecorded {
                done: done(),
                source: Box::new(source),
            })?
            .into_iter()
            .rev()
            .find(|e| e.action == HistoryAction::Deploy && e.version == version);
        let entry = HistoryEntry {
            version,
            previous_version,
            generation,
            ..match deployed {
                Some(d) => HistoryEntry {
                    at_ms: lease::now_ms(),
                    action: HistoryAction::Rollback,
                    ..d
                },
                None => self.history_entry(hook, HistoryAction::Rollback),
            }
        };
        self.record([(entry, None)], done)
    }
}
