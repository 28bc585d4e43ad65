//! Stage 2, compile: [`CodeFlow::jit_compile_code`] (cached in the registry), the elite,
//! scouting and helper-table builds, and the options each is compiled with. Every
//! [`Compiled`] is made here, from a [`Validated`], and carries what it was verified for.

use super::{hex, verify::VerifiedFor, CodeFlow, Extension, Validated};
use crate::error::{ControlError, Result};
use crate::registry::Registry;
use crate::tier::Tier;
use rdx_bpf::isa::{encode, raw_to_bytes};
use rdx_jit::artifact::Artifact;
use rdx_jit::{Build, CompileOptions, Compiler, HelperCalls};
use sha2::{Digest, Sha256};
use std::time::Instant;

/// A compiled program, ready to link. Only the compile operations of [`CodeFlow`] make one,
/// from a [`Validated`]; it remembers the hook, class, program and EIM spec it was verified
/// for, and [`CodeFlow::prepare_prog`] refuses it for anything else
/// ([`ControlError::NotVerifiedFor`]).
#[derive(Clone, Debug)]
pub struct Compiled {
    pub(super) artifact: Artifact,
    pub(super) artifact_hash: [u8; 32],
    pub(super) cached: bool,
    pub(super) budget: u64,
    pub(super) tier: Tier,
    pub(super) build: Build,
    /// Whether its code calls helpers through the region's helper table.
    pub(super) helper_table: bool,
    pub(super) verified: VerifiedFor,
}

impl Compiled {
    /// The relocatable code and its metadata.
    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// SHA-256 of the serialised artifact (its registry key).
    pub fn artifact_hash(&self) -> &[u8; 32] {
        &self.artifact_hash
    }

    /// Whether it came from the registry's cache.
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// The class's budget to put in the hook slot.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The hook it was verified for.
    pub fn hook(&self) -> &str {
        &self.verified.hook
    }

    /// The extension class it was verified against.
    pub fn class(&self) -> &str {
        &self.verified.class
    }

    /// The JIT tier that built it (recorded with the version on the node).
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Which build it is (generic, elite or scouting).
    pub fn build(&self) -> &Build {
        &self.build
    }

    /// Whether its code calls helpers through the region's helper table
    /// ([`CodeFlow::jit_compile_helper_table`]) rather than by address.
    pub fn calls_helpers_by_table(&self) -> bool {
        self.helper_table
    }
}

/// What [`CodeFlow::compile_with`] builds: one of the JIT's builds, calling helpers by
/// address or (for code that runs in other processes than the node's) through the region's
/// helper table.
struct BuildRequest {
    build: Build,
    helper_table: bool,
}

impl BuildRequest {
    fn generic() -> BuildRequest {
        BuildRequest {
            build: Build::Generic,
            helper_table: false,
        }
    }
}

impl CodeFlow {
    /// The compile cache key: bytecode hash, target architecture, class, metering and (for
    /// the baseline tier) the tier, so that a cache never hands one tier's code to the other.
    pub fn cache_key(&self, ext: &Extension, checked: &Validated) -> String {
        let mut key = format!(
            "{}:{}:{}/{}:{}",
            ext.hash_hex(),
            self.arch.name(),
            checked.verified.hook,
            checked.verified.class,
            if checked.facts().needs_budget {
                "metered"
            } else {
                "bounded"
            }
        );
        if self.tier != Tier::Optimizing {
            key.push(':');
            key.push_str(self.tier.name());
        }
        key
    }

    /// `jit_compile_code`: the CodeFlow's tier (Cranelift by default, [`Tier::Baseline`] if
    /// set) for the node's architecture, or the registry's cached artifact for the same
    /// bytecode, architecture, class and tier. `checked` must be `ext`'s verdict on this
    /// node ([`ControlError::NotVerifiedFor`] otherwise).
    pub fn jit_compile_code(
        &self,
        ext: &Extension,
        checked: &Validated,
        registry: Option<&Registry>,
    ) -> Result<Compiled> {
        self.check_verified_for(&checked.verified, ext, None)?;
        let key = self.cache_key(ext, checked);
        if let Some(reg) = registry {
            // `cached_artifact` has checked the bytes against their content hash.
            if let Some((hash, bytes)) = reg.cached_artifact(&key)? {
                if let Ok(artifact) = Artifact::from_bytes(&bytes) {
                    self.check_binding(&artifact, &hash, ext, checked)?;
                    return Ok(Compiled {
                        artifact,
                        artifact_hash: hash,
                        cached: true,
                        budget: checked.facts().budget.unwrap_or(u64::MAX),
                        tier: self.tier,
                        build: Build::Generic,
                        helper_table: false,
                        verified: checked.verified.clone(),
                    });
                }
            }
        }
        let (compiled, bytes, _) = self.compile_with(ext, checked, BuildRequest::generic())?;
        if let Some(reg) = registry {
            reg.put_artifact(&key, &compiled.artifact_hash, &bytes)?;
        }
        Ok(compiled)
    }

    /// Checks that a cached artifact was built from `ext`'s bytecode for this node's
    /// architecture, the verified hook and class and the metering the verifier asked for
    /// (its metadata's source and options hashes), and is not an elite build: an artifact
    /// whose bytes are intact but that was compiled from another program, or for another
    /// class, is refused instead of deployed under this program's verdict.
    fn check_binding(
        &self,
        artifact: &Artifact,
        hash: &[u8; 32],
        ext: &Extension,
        checked: &Validated,
    ) -> Result<()> {
        let refuse = |what: &'static str| ControlError::ArtifactBinding {
            hash: hex(hash),
            what,
        };
        let source: [u8; 32] = Sha256::digest(raw_to_bytes(&encode(ext.insns()))).into();
        if artifact.meta.source_hash != source {
            return Err(refuse("another program's bytecode"));
        }
        if artifact.meta.arch != self.arch {
            return Err(refuse("another architecture"));
        }
        if artifact.meta.deoptimises() {
            return Err(refuse("an elite (speculative) build"));
        }
        if artifact.meta.needs_budget() != checked.facts().needs_budget {
            return Err(refuse("other metering than the verifier asked for"));
        }
        if artifact.meta.options_hash
            != self
                .compile_options(ext, checked, &BuildRequest::generic())
                .hash()
        {
            return Err(refuse("another hook, class or set of compile options"));
        }
        Ok(())
    }

    /// The options `ext` is compiled with for `checked`'s hook and class in `request`.
    fn compile_options(
        &self,
        ext: &Extension,
        checked: &Validated,
        request: &BuildRequest,
    ) -> CompileOptions {
        let mut opts = CompileOptions::new(self.arch, request.build.clone());
        opts.needs_budget = checked.facts().needs_budget;
        opts.eim_class = format!("{}/{}", checked.verified.hook, checked.verified.class);
        opts.verify_ir = false;
        if request.helper_table {
            opts.helper_calls = HelperCalls::Table {
                table_len: self.view.info.helper_capacity,
            };
        } else if !matches!(request.build, Build::Scouting(_)) {
            // Array lookups are inlined against the definitions' geometry: `maps_for` links
            // only maps of exactly that shape (a live map of another shape is an error).
            opts.inline_array_lookups(ext.maps());
            opts.pipeline = self.tier.pipeline();
        }
        opts
    }

    /// Compiles the elite (speculative) build of `ext`: the generic build's options plus
    /// `speculation`'s guards. Deploying it ([`CodeFlow::prepare_prog`]) also writes the
    /// fallback image its deoptimised runs continue in. Not cached: a profile decides it.
    /// Only the optimizing tier builds elite code: on a CodeFlow whose tier is
    /// [`Tier::Baseline`] this is [`ControlError::NotInBaseline`].
    pub fn jit_compile_elite(
        &self,
        ext: &Extension,
        checked: &Validated,
        speculation: rdx_jit::Speculation,
    ) -> Result<(Compiled, rdx_jit::CompileStats)> {
        self.check_verified_for(&checked.verified, ext, None)?;
        let (compiled, _, stats) = self.compile_with(
            ext,
            checked,
            BuildRequest {
                build: Build::Elite(speculation),
                helper_table: false,
            },
        )?;
        Ok((compiled, stats))
    }

    /// Compiles the scouting build of `ext` (by the optimizing tier, whatever this
    /// CodeFlow's tier): every conditional jump counts its two directions in the value of
    /// the map `counters` names, which `ext` must declare. Not cached.
    pub fn jit_compile_scouting(
        &self,
        ext: &Extension,
        checked: &Validated,
        counters: rdx_jit::BranchCounters,
    ) -> Result<Compiled> {
        self.check_verified_for(&checked.verified, ext, None)?;
        Ok(self
            .compile_with(
                ext,
                checked,
                BuildRequest {
                    build: Build::Scouting(counters),
                    helper_table: false,
                },
            )?
            .0)
    }

    /// Compiles `ext` to call helpers through the region's helper table instead of by
    /// address (by the optimizing tier), for code that runs in other processes than the
    /// node's (a cross-sandbox callee). Not cached.
    pub fn jit_compile_helper_table(
        &self,
        ext: &Extension,
        checked: &Validated,
    ) -> Result<Compiled> {
        self.check_verified_for(&checked.verified, ext, None)?;
        Ok(self
            .compile_with(
                ext,
                checked,
                BuildRequest {
                    build: Build::Generic,
                    helper_table: true,
                },
            )?
            .0)
    }

    fn compile_with(
        &self,
        ext: &Extension,
        checked: &Validated,
        request: BuildRequest,
    ) -> Result<(Compiled, Vec<u8>, rdx_jit::CompileStats)> {
        // Only generic and elite builds calling helpers by address follow the CodeFlow's
        // tier.
        let tier = match request.build {
            Build::Generic | Build::Elite(_) if !request.helper_table => self.tier,
            _ => Tier::Optimizing,
        };
        let opts = self.compile_options(ext, checked, &request);
        let compile_err = |e: rdx_jit::CompileError| match e {
            rdx_jit::CompileError::NotInBaseline { what } => ControlError::NotInBaseline { what },
            e => ControlError::Compile(e),
        };
        let (artifact, stats) = match tier {
            // No Cranelift code generator is built for the baseline tier.
            Tier::Baseline => {
                let t = Instant::now();
                let artifact = rdx_jit::compile(ext.insns(), &opts).map_err(compile_err)?;
                let stats = rdx_jit::CompileStats {
                    insns: ext.insns().len(),
                    code_bytes: artifact.code.len(),
                    elapsed: t.elapsed(),
                    ..Default::default()
                };
                (artifact, stats)
            }
            Tier::Optimizing => Compiler::new(opts.arch)
                .map_err(compile_err)?
                .compile(ext.insns(), &opts)
                .map_err(compile_err)?,
        };
        let bytes = artifact.to_bytes();
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        Ok((
            Compiled {
                artifact,
                artifact_hash: hash,
                cached: false,
                budget: checked.facts().budget.unwrap_or(u64::MAX),
                tier,
                build: request.build,
                helper_table: request.helper_table,
                verified: checked.verified.clone(),
            },
            bytes,
            stats,
        ))
    }
}
