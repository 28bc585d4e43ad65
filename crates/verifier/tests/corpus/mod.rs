//! The verifier corpus (`bpf/verifier/`): assembly cases (`asm/*.s`) and C programs (`*.c`,
//! compiled by `rdx-testdata`), each declaring its environment and expected outcome in header
//! comments:
//!
//! ```text
//! # expect: accept                      (or: reject <rule-id>)
//! # env: xdp | socket_filter | eim <spec path under the repo> <hook> <class>
//! # map: <name> <hash|array|percpu_array|ringbuf|prog_array> <key> <value> <entries> [ro]
//! # kernel: skip <why>                  (not comparable with the kernel verifier)
//! # worst: <n>                          (expected worst-case instruction count)
//! ```
//! C files use `//` instead of `#` and take their maps from the object.

#![allow(dead_code)]

use rdx_bpf::isa::{ImmKind, Insn};
use rdx_bpf::{MapDef, MapOrigin};
use rdx_region::layout::MapType;
use rdx_verifier::{EimSpec, KernelProgType, Rule, VerifyOptions};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    Accept,
    Reject(Rule),
}

#[derive(Clone, Debug)]
pub enum EnvSpec {
    Kernel(KernelProgType),
    Eim {
        spec: PathBuf,
        hook: String,
        class: String,
    },
}

#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub expect: Expect,
    pub env: EnvSpec,
    pub insns: Vec<Insn>,
    pub maps: Vec<MapDef>,
    pub kernel_skip: Option<String>,
    pub worst: Option<u64>,
}

impl Case {
    pub fn options(&self) -> VerifyOptions {
        match &self.env {
            EnvSpec::Kernel(t) => VerifyOptions::kernel(*t),
            EnvSpec::Eim { spec, hook, class } => {
                let text = std::fs::read_to_string(spec)
                    .unwrap_or_else(|e| panic!("{}: {e}", spec.display()));
                let spec =
                    EimSpec::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", self.name));
                VerifyOptions::eim(&spec, hook, class)
                    .unwrap_or_else(|e| panic!("{}: {e}", self.name))
            }
        }
    }

    pub fn kernel_type(&self) -> Option<KernelProgType> {
        match self.env {
            EnvSpec::Kernel(t) if self.kernel_skip.is_none() => Some(t),
            _ => None,
        }
    }
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Header {
    expect: Option<Expect>,
    env: Option<EnvSpec>,
    maps: Vec<MapDef>,
    kernel_skip: Option<String>,
    worst: Option<u64>,
}

fn parse_header(name: &str, text: &str, marker: &str) -> Header {
    let mut h = Header {
        expect: None,
        env: None,
        maps: Vec::new(),
        kernel_skip: None,
        worst: None,
    };
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix(marker) else {
            continue;
        };
        let rest = rest.trim();
        let Some((key, val)) = rest.split_once(':') else {
            continue;
        };
        let val = val.trim();
        let words: Vec<&str> = val.split_whitespace().collect();
        match key.trim() {
            "expect" => {
                h.expect = Some(match words.as_slice() {
                    ["accept"] => Expect::Accept,
                    ["reject", id] => Expect::Reject(
                        Rule::from_id(id).unwrap_or_else(|| panic!("{name}: unknown rule `{id}`")),
                    ),
                    _ => panic!("{name}: bad expect line `{val}`"),
                })
            }
            "env" => {
                h.env = Some(match words.as_slice() {
                    ["xdp"] => EnvSpec::Kernel(KernelProgType::Xdp),
                    ["socket_filter"] => EnvSpec::Kernel(KernelProgType::SocketFilter),
                    ["eim", spec, hook, class] => EnvSpec::Eim {
                        spec: repo_root().join(spec),
                        hook: hook.to_string(),
                        class: class.to_string(),
                    },
                    _ => panic!("{name}: bad env line `{val}`"),
                })
            }
            "map" => {
                let [mname, ty, k, v, n, rest @ ..] = words.as_slice() else {
                    panic!("{name}: bad map line `{val}`")
                };
                let map_type = match *ty {
                    "hash" => MapType::Hash,
                    "array" => MapType::Array,
                    "percpu_array" => MapType::PerThreadArray,
                    "ringbuf" => MapType::RingBuf,
                    "prog_array" => MapType::ProgArray,
                    other => panic!("{name}: unknown map type `{other}`"),
                };
                h.maps.push(MapDef {
                    name: mname.to_string(),
                    map_type: map_type.into(),
                    key_size: k.parse().unwrap(),
                    value_size: v.parse().unwrap(),
                    max_entries: n.parse().unwrap(),
                    flags: 0,
                    origin: MapOrigin::Btf,
                    initial_value: None,
                    read_only: rest.contains(&"ro"),
                })
            }
            "kernel" => h.kernel_skip = Some(val.trim_start_matches("skip").trim().to_string()),
            "worst" => h.worst = Some(val.parse().unwrap()),
            _ => {}
        }
    }
    h
}

const MAP_MAGIC: u64 = 0x7ead_0000_0000_0000;
const MAPVAL_MAGIC: u64 = 0x7eae_0000_0000_0000;

/// Assembles a case: the conformance-suite syntax plus `map:NAME` and `mapvalue:NAME+OFF`
/// operands of `lddw`.
fn assemble_case(name: &str, src: &str, maps: &[MapDef]) -> Vec<Insn> {
    let idx = |m: &str| {
        maps.iter()
            .position(|d| d.name == m)
            .unwrap_or_else(|| panic!("{name}: no map `{m}`")) as u64
    };
    let mut text = String::new();
    for line in src.lines() {
        let mut l = line.to_string();
        if l.trim_start().starts_with('#') {
            // Header and comment lines pass through untouched.
        } else if let Some(p) = l.find("mapvalue:") {
            let tail = &l[p + 9..];
            let end = tail
                .find(|c: char| c.is_whitespace() || c == '#')
                .unwrap_or(tail.len());
            let (m, off) = tail[..end].split_once('+').unwrap_or((&tail[..end], "0"));
            let v = MAPVAL_MAGIC | (off.parse::<u64>().unwrap() << 16) | idx(m);
            l = format!("{}{:#x}{}", &l[..p], v, &tail[end..]);
        } else if let Some(p) = l.find("map:") {
            let tail = &l[p + 4..];
            let end = tail
                .find(|c: char| c.is_whitespace() || c == '#')
                .unwrap_or(tail.len());
            let v = MAP_MAGIC | idx(&tail[..end]);
            l = format!("{}{:#x}{}", &l[..p], v, &tail[end..]);
        }
        text.push_str(&l);
        text.push('\n');
    }
    let mut insns = rdx_bpf::asm::assemble(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    for i in insns.iter_mut() {
        if let Insn::LoadImm64 {
            kind,
            imm_lo,
            imm_hi,
            ..
        } = i
        {
            let v = Insn::imm64(*imm_lo, *imm_hi);
            if v & 0xffff_0000_0000_0000 == MAP_MAGIC {
                *kind = ImmKind::MapIdx;
                *imm_lo = (v & 0xffff) as i32;
                *imm_hi = 0;
            } else if v & 0xffff_0000_0000_0000 == MAPVAL_MAGIC {
                *kind = ImmKind::MapIdxValue;
                *imm_lo = (v & 0xffff) as i32;
                *imm_hi = ((v >> 16) & 0xffff_ffff) as i32;
            }
        }
    }
    insns
}

pub fn asm_cases() -> Vec<Case> {
    let dir = repo_root().join("bpf/verifier/asm");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "s"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = format!("asm/{}", p.file_name().unwrap().to_string_lossy());
            let src = std::fs::read_to_string(&p).unwrap();
            let h = parse_header(&name, &src, "#");
            let insns = assemble_case(&name, &src, &h.maps);
            Case {
                expect: h
                    .expect
                    .unwrap_or_else(|| panic!("{name}: no `# expect:` line")),
                env: h.env.unwrap_or_else(|| panic!("{name}: no `# env:` line")),
                insns,
                maps: h.maps,
                kernel_skip: h.kernel_skip,
                worst: h.worst,
                name,
            }
        })
        .collect()
}

pub fn c_cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut names = rdx_testdata::objects_in("verifier");
    names.sort();
    for obj in names {
        let src_path = repo_root().join(format!("bpf/{obj}.c"));
        let src = std::fs::read_to_string(&src_path)
            .unwrap_or_else(|e| panic!("{}: {e}", src_path.display()));
        let name = format!("{obj}.c");
        let h = parse_header(&name, &src, "//");
        let object = rdx_bpf::loader::load(&rdx_testdata::object(&obj))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            object.programs.len(),
            1,
            "{name}: corpus C files hold exactly one program"
        );
        let prog = &object.programs[0];
        let env = h.env.unwrap_or_else(|| {
            EnvSpec::Kernel(
                KernelProgType::from_section(&prog.section)
                    .unwrap_or_else(|| panic!("{name}: no env and section `{}`", prog.section)),
            )
        });
        out.push(Case {
            expect: h
                .expect
                .unwrap_or_else(|| panic!("{name}: no `// expect:` line")),
            env,
            insns: prog.insns.clone(),
            maps: object.maps.clone(),
            kernel_skip: h.kernel_skip,
            worst: h.worst,
            name,
        });
    }
    out
}

pub fn all_cases() -> Vec<Case> {
    let mut v = asm_cases();
    v.extend(c_cases());
    v
}
