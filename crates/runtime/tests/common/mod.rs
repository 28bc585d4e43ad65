//! Test harness shared by the cross-process tests: a spawned `rdx-test-host runtime` and the
//! control plane's handle on its region.
#![allow(dead_code)]

use rdx_jit::link::{link, LinkTarget};
use rdx_jit::{Build, CompileOptions, Compiler, Symbol};
use rdx_region::layout::{active_word, offsets, ContextKind, MapType, SectionId, MAP_ALIGN};
use rdx_test_support::{HostProcess, ShmPath};
use rdx_transport::context::read_context;
use rdx_transport::shm::ShmTransport;
use rdx_transport::xstate::{self, Copies, MapRef, MapSpec, UPDATE_ANY};
use rdx_transport::Transport;

/// `rdx-test-host runtime` declaring hooks `h` and `other`, removed (process and region
/// file) on drop.
pub struct Host {
    process: HostProcess,
    pub path: String,
}

impl Host {
    pub fn start(extra: &[&str]) -> Host {
        let args: Vec<&str> = extra.iter().copied().chain(["h", "other"]).collect();
        let process = HostProcess::start("runtime", ShmPath::new("rt-test"), &args);
        Host {
            path: process.path().to_str().expect("UTF-8 path").to_string(),
            process,
        }
    }

    /// Sends `cmd` and returns the reply.
    pub fn ask(&mut self, cmd: &str) -> String {
        self.process.cmd(cmd)
    }

    /// Sends a line without waiting for the reply (read it with [`Host::line`]).
    pub fn send(&mut self, line: &str) {
        self.process.process().send(line)
    }

    /// The next reply line.
    pub fn line(&mut self) -> String {
        self.process.process().line()
    }

    /// `(r0, out)` of one run of `h` with `value`.
    pub fn run(&mut self, value: u64) -> (u64, u64) {
        self.process.run(&format!("h {value}"))
    }

    /// `h`'s counters: runs, failures, errors, hold timeouts.
    pub fn stats(&mut self) -> Vec<u64> {
        let r = self.ask("stats h");
        r.split_whitespace()
            .skip(2)
            .step_by(2)
            .map(|v| v.parse().unwrap())
            .collect()
    }
}

/// The control plane's view of a node: the transport plus what it read from the header.
pub struct Node {
    pub t: ShmTransport,
    pub hook: u64,
    pub next_code: u64,
}

impl Node {
    pub fn attach(host: &Host) -> Node {
        let node = Node::attach_hook(&host.path, "h");
        let ctx = read_context(&node.t, node.t.info()).unwrap();
        assert_eq!(ctx.iter().find(|s| s.name == "h").unwrap().size, 16);
        node
    }

    pub fn attach_hook(path: &str, hook: &str) -> Node {
        let t = ShmTransport::open(path).expect("open region");
        let ctx = read_context(&t, t.info()).unwrap();
        let h = ctx
            .iter()
            .find(|s| s.kind == ContextKind::Hook && s.name == hook)
            .expect("hook exported");
        let next_code = t.info().section(SectionId::Code).offset;
        Node {
            hook: h.addr,
            t,
            next_code,
        }
    }

    pub fn symbol(&self, name: &str) -> u64 {
        read_context(&self.t, self.t.info())
            .unwrap()
            .iter()
            .find(|s| s.symbol() == name)
            .unwrap_or_else(|| panic!("{name} not exported"))
            .addr
    }

    /// Writes code into a fresh part of the arena; returns its entry offset.
    pub fn place(&mut self, code: &[u8]) -> u32 {
        let at = self.next_code;
        self.t.write(at, code).unwrap();
        self.next_code += (code.len() as u64 + 15) & !15;
        at as u32
    }

    /// Publishes with one CAS; returns the previous word.
    pub fn flip(&self, expected: u64, new: u64) -> u64 {
        self.t.fence().unwrap();
        let prev = self
            .t
            .compare_and_swap(self.hook + offsets::HOOK_ACTIVE, expected, new)
            .unwrap();
        assert_eq!(prev, expected, "slot changed under us");
        prev
    }
}

/// What the control plane keeps per node in this test: the next free map id and scratchpad
/// byte (a bump allocator, standing in for the control plane's).
pub struct Deployer {
    pub next_id: u32,
    pub next_scratch: u64,
}

impl Deployer {
    pub fn new(node: &Node) -> Self {
        let info = node.t.info();
        Self {
            next_id: 1,
            next_scratch: info.section(SectionId::Scratch).offset + info.scratch_reserved,
        }
    }

    /// Creates the object's maps, compiles its first program, links and writes it; returns
    /// the active word to publish and the maps.
    pub fn prepare(
        &mut self,
        node: &mut Node,
        object: &str,
        version: u32,
        needs_budget: bool,
    ) -> (u64, Vec<MapRef>) {
        let obj = rdx_bpf::loader::load(&rdx_testdata::object(object)).expect("load object");
        let info = node.t.info().clone();
        let mut maps = Vec::new();
        for def in &obj.maps {
            let map_type = MapType::from_u32(def.map_type.to_kernel()).expect("supported map type");
            let spec = MapSpec {
                map_type,
                key_size: def.key_size,
                value_size: def.value_size,
                max_entries: def.max_entries,
                flags: 0,
                name: def.name.chars().take(24).collect(),
            };
            let size = xstate::layout(&spec, info.thread_slots)
                .unwrap()
                .footprint();
            let m = xstate::create(&node.t, &info, self.next_id, self.next_scratch, &spec).unwrap();
            if let Some(init) = &def.initial_value {
                xstate::update(
                    &node.t,
                    &m,
                    &0u32.to_le_bytes(),
                    init,
                    UPDATE_ANY,
                    Copies::All,
                    1,
                )
                .unwrap();
            }
            self.next_id += 1;
            self.next_scratch += size.next_multiple_of(MAP_ALIGN);
            maps.push(m);
        }
        let prog = &obj.programs[0];
        let mut opts = CompileOptions::new(rdx_jit::Arch::X86_64, Build::Generic);
        opts.needs_budget = needs_budget;
        let (artifact, _) = Compiler::new(rdx_jit::Arch::X86_64)
            .unwrap()
            .compile(&prog.insns, &opts)
            .expect("compile");
        let ctx = rdx_transport::context::read_context(&node.t, &info).unwrap();
        let base = info.base_address;
        let resolve = |s: &Symbol| -> Option<u64> {
            match s {
                Symbol::Map(i) => maps.get(*i as usize).map(|m| base + m.offset),
                Symbol::MapValue(i) => maps.get(*i as usize).map(|m| base + m.data),
                other => ctx
                    .iter()
                    .find(|c| c.symbol() == other.to_string())
                    .map(|c| c.addr),
            }
        };
        let load_offset = node.next_code;
        let linked = link(
            &artifact,
            LinkTarget::new(rdx_jit::Arch::X86_64),
            &resolve,
            base + load_offset,
        )
        .expect("link");
        let placed = node.place(&linked.code) as u64;
        assert_eq!(placed, load_offset);
        (
            active_word(version, (load_offset + linked.entry_offset as u64) as u32),
            maps,
        )
    }
}
