//! The four stages as one operation ([`CodeFlow::deploy`]) and what hears them: a
//! [`DeployObserver`] is told as each stage starts, ends (with its product and duration) or
//! fails; [`DeployTimings`] is the observer benchmarks and reports use.

use super::{CodeFlow, Compiled, Extension, Prepared, Published, Validated};
use crate::error::{ControlError, Result};
use crate::registry::Registry;
use std::time::{Duration, Instant};

/// The stages of [`CodeFlow::deploy`], in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeployStage {
    /// [`CodeFlow::validate_code`].
    Verify,
    /// [`CodeFlow::jit_compile_code`] (or the registry's cache).
    Compile,
    /// [`CodeFlow::prepare_prog`]: allocate, link and write, not yet visible.
    Prepare,
    /// [`CodeFlow::tx`]: the compare-and-swap that makes it visible.
    Publish,
}

/// What a deploy stage produced, as [`DeployObserver::finished`] hears it.
#[derive(Clone, Copy, Debug)]
pub enum StageDone<'a> {
    /// The verifier's verdict.
    Verified(&'a Validated),
    /// The compiled (or cached) program.
    Compiled(&'a Compiled),
    /// The version written into the node.
    Prepared(&'a Prepared),
    /// The version made visible.
    Published(&'a Published),
}

impl StageDone<'_> {
    /// The stage that produced it.
    pub fn stage(&self) -> DeployStage {
        match self {
            StageDone::Verified(_) => DeployStage::Verify,
            StageDone::Compiled(_) => DeployStage::Compile,
            StageDone::Prepared(_) => DeployStage::Prepare,
            StageDone::Published(_) => DeployStage::Publish,
        }
    }
}

/// Hears the progress of [`CodeFlow::deploy_observed`]: each stage as it starts, then
/// either what it produced and how long it took, or the error that ends the deploy. Every
/// method does nothing by default; `()` is the observer that hears nothing.
pub trait DeployObserver {
    /// `stage` is about to run.
    fn started(&mut self, stage: DeployStage) {
        let _ = stage;
    }

    /// A stage finished after `took`, producing `done`.
    fn finished(&mut self, done: StageDone<'_>, took: Duration) {
        let _ = (done, took);
    }

    /// `stage` failed with `error`; no later stage runs.
    fn failed(&mut self, stage: DeployStage, error: &ControlError) {
        let _ = (stage, error);
    }
}

impl DeployObserver for () {}

/// Timings of one deploy's stages, in microseconds: the observer benchmarks and reports use.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DeployTimings {
    /// [`DeployStage::Verify`].
    pub validate_us: f64,
    /// [`DeployStage::Compile`].
    pub compile_us: f64,
    /// [`DeployStage::Prepare`].
    pub prepare_us: f64,
    /// [`DeployStage::Publish`].
    pub publish_us: f64,
}

impl DeployObserver for DeployTimings {
    fn finished(&mut self, done: StageDone<'_>, took: Duration) {
        let us = took.as_secs_f64() * 1e6;
        match done.stage() {
            DeployStage::Verify => self.validate_us = us,
            DeployStage::Compile => self.compile_us = us,
            DeployStage::Prepare => self.prepare_us = us,
            DeployStage::Publish => self.publish_us = us,
        }
    }
}

/// Runs one deploy stage under `observer`: started, then finished with its product (made
/// by `done`) and duration, or failed.
fn observe<T>(
    observer: &mut dyn DeployObserver,
    stage: DeployStage,
    done: impl FnOnce(&T) -> StageDone<'_>,
    run: impl FnOnce() -> Result<T>,
) -> Result<T> {
    observer.started(stage);
    let t = Instant::now();
    match run() {
        Ok(product) => {
            observer.finished(done(&product), t.elapsed());
            Ok(product)
        }
        Err(e) => {
            observer.failed(stage, &e);
            Err(e)
        }
    }
}

impl CodeFlow {
    /// Validate, compile (or take from the registry's compile cache), deploy: the whole
    /// path for one hook.
    pub fn deploy(
        &mut self,
        hook: &str,
        ext: &Extension,
        class: Option<&str>,
        registry: Option<&Registry>,
    ) -> Result<Published> {
        self.deploy_observed(hook, ext, class, registry, &mut ())
    }

    /// [`CodeFlow::deploy`], telling `observer` as each stage starts and ends (with what it
    /// produced and how long it took) or fails.
    pub fn deploy_observed(
        &mut self,
        hook: &str,
        ext: &Extension,
        class: Option<&str>,
        registry: Option<&Registry>,
        observer: &mut dyn DeployObserver,
    ) -> Result<Published> {
        let checked = observe(
            observer,
            DeployStage::Verify,
            |x| StageDone::Verified(x),
            || self.validate_code(ext, hook, class),
        )?;
        let compiled = observe(
            observer,
            DeployStage::Compile,
            |x| StageDone::Compiled(x),
            || self.jit_compile_code(ext, &checked, registry),
        )?;
        let prepared = observe(
            observer,
            DeployStage::Prepare,
            |x| StageDone::Prepared(x),
            || self.prepare_prog(hook, ext, &compiled),
        )?;
        observe(
            observer,
            DeployStage::Publish,
            |x| StageDone::Published(x),
            || Ok(self.tx(vec![prepared])?.remove(0)),
        )
    }
}
