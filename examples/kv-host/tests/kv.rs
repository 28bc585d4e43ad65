//! kv-host end to end: start the server, then (as the control plane, from this process)
//! compile bpf/runtime/kv_guard.c's two programs, create their shared per-thread map in the
//! host's region, link, write and publish both hooks, and watch the server's answers change.

#![cfg(target_arch = "x86_64")]

use rdx_jit::link::{link, LinkTarget};
use rdx_jit::{Build, CompileOptions, Compiler, Symbol};
use rdx_region::layout::{active_word, offsets, ContextKind, MapType, SectionId};
use rdx_transport::context::read_context;
use rdx_transport::shm::ShmTransport;
use rdx_transport::xstate::{self, MapSpec};
use rdx_transport::Transport;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct KvHost {
    child: Child,
    region: String,
    port: u16,
}

impl Drop for KvHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.region);
    }
}

fn start() -> KvHost {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv-host"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let region = line.trim().strip_prefix("region ").unwrap().to_string();
    line.clear();
    out.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .unwrap()
        .parse()
        .unwrap();
    KvHost {
        child,
        region,
        port,
    }
}

struct Client {
    out: TcpStream,
    inp: BufReader<TcpStream>,
}

impl Client {
    fn new(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        Client {
            inp: BufReader::new(s.try_clone().unwrap()),
            out: s,
        }
    }

    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.out, "{cmd}").unwrap();
        let mut line = String::new();
        self.inp.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

#[test]
fn deployed_get_and_set_extensions_change_the_servers_answers() {
    let host = start();
    let mut c = Client::new(host.port);
    assert_eq!(c.ask("SET ro_x 1"), "OK");
    assert_eq!(c.ask("SET name alice"), "OK");
    assert_eq!(c.ask("GET name"), "VALUE alice");
    assert_eq!(c.ask("GET magic"), "NOTFOUND");

    // Control plane: everything below happens in this process, through the region.
    let t = ShmTransport::open(&host.region).unwrap();
    let info = t.info().clone();
    let ctx = read_context(&t, &info).unwrap();
    let obj = rdx_bpf::loader::load(&rdx_testdata::object("runtime/kv_guard")).unwrap();
    assert_eq!(obj.maps.len(), 1);
    let def = &obj.maps[0];
    let spec = MapSpec {
        map_type: MapType::from_u32(def.map_type.to_kernel()).unwrap(),
        key_size: def.key_size,
        value_size: def.value_size,
        max_entries: def.max_entries,
        flags: 0,
        name: def.name.clone(),
    };
    let gets = xstate::create(
        &t,
        &info,
        1,
        info.section(SectionId::Scratch).offset + info.scratch_reserved,
        &spec,
    )
    .unwrap();
    let compiler = Compiler::new(rdx_jit::Arch::X86_64).unwrap();
    let mut code_at = info.section(SectionId::Code).offset;
    for prog in &obj.programs {
        let hook = prog.section.strip_prefix("rdx/").unwrap();
        let slot = ctx
            .iter()
            .find(|s| s.kind == ContextKind::Hook && s.name == hook)
            .unwrap()
            .addr;
        let (artifact, _) = compiler
            .compile(
                &prog.insns,
                &CompileOptions::new(rdx_jit::Arch::X86_64, Build::Generic),
            )
            .unwrap();
        let resolve = |s: &Symbol| match s {
            Symbol::Map(0) => Some(info.base_address + gets.offset),
            other => ctx
                .iter()
                .find(|c| c.symbol() == other.to_string())
                .map(|c| c.addr),
        };
        let linked = link(
            &artifact,
            LinkTarget::new(rdx_jit::Arch::X86_64),
            &resolve,
            info.base_address + code_at,
        )
        .unwrap();
        t.write(code_at, &linked.code).unwrap();
        let word = active_word(1, (code_at + linked.entry_offset as u64) as u32);
        assert_eq!(
            t.compare_and_swap(slot + offsets::HOOK_ACTIVE, 0, word)
                .unwrap(),
            0
        );
        code_at += (linked.code.len() as u64).next_multiple_of(16);
    }

    assert_eq!(c.ask("SET ro_y 1"), "DENIED");
    assert_eq!(c.ask("SET city paris"), "OK");
    assert_eq!(c.ask("GET city"), "VALUE Paris");
    assert_eq!(c.ask("GET magic"), "VALUE 42");
    assert_eq!(c.ask("GET name"), "VALUE alice");
    // Per-thread counts: sum the copies remotely.
    let mut out = vec![0u8; gets.lookup_len()];
    assert!(xstate::lookup(&t, &gets, &(b'm' as u32).to_le_bytes(), &mut out).unwrap());
    let total: u64 = out
        .chunks(8)
        .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
        .sum();
    assert_eq!(total, 1);
    assert_eq!(c.ask("STATS"), "STATS get 3 0 set 2 0");
}
