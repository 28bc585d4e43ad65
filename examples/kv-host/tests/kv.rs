//! kv-host end to end: start the server, then (as the control plane, from this process)
//! compile bpf/runtime/kv_guard.c's two programs, create their shared per-thread map in the
//! host's region, link, write and publish both hooks, and watch the server's answers change.

#![cfg(target_arch = "x86_64")]

use rdx_jit::link::{link, LinkTarget};
use rdx_jit::{Build, CompileOptions, Compiler, Symbol};
use rdx_region::layout::{active_word, offsets, ContextKind, SectionId};
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
        // One send: a command written as two stalls in the client's own Nagle wait.
        self.out.write_all(format!("{cmd}\n").as_bytes()).unwrap();
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
        map_type: def.map_type.supported().unwrap(),
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
    let compiler = Compiler::new(rdx_region::layout::Arch::X86_64).unwrap();
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
                &CompileOptions::new(rdx_region::layout::Arch::X86_64, Build::Generic),
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
            LinkTarget::new(rdx_region::layout::Arch::X86_64),
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

#[test]
fn a_reply_does_not_wait_for_the_clients_delayed_ack() {
    let host = start();
    let mut c = Client::new(host.port);
    assert_eq!(c.ask("SET a hello"), "OK");
    // A reply written as two sends stalled ~40 ms (Nagle's algorithm holding the second
    // segment until the client's delayed ACK of the first): 20 requests took 800 ms.
    let start = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(c.ask("GET a"), "VALUE hello");
    }
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_millis(400),
        "20 GETs took {took:?}"
    );
    // Commands that arrive together are answered together: none of the replies stalls
    // behind an earlier one still unacknowledged (10 rounds stalled at least 800 ms).
    let start = std::time::Instant::now();
    for _ in 0..10 {
        c.out.write_all(b"GET a\nGET b\nGET a\n").unwrap();
        let mut replies = Vec::new();
        for _ in 0..3 {
            let mut line = String::new();
            c.inp.read_line(&mut line).unwrap();
            replies.push(line.trim().to_string());
        }
        assert_eq!(replies, ["VALUE hello", "NOTFOUND", "VALUE hello"]);
    }
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_millis(400),
        "10 rounds of 3 pipelined commands took {took:?}"
    );
}

#[test]
fn sigterm_and_sigint_remove_the_region_file() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut host = start();
        assert!(std::path::Path::new(&host.region).exists());
        // SAFETY: signalling the child we spawned and have not reaped, by its pid.
        assert_eq!(unsafe { libc::kill(host.child.id() as i32, signal) }, 0);
        let status = host.child.wait().unwrap();
        assert!(
            status.success(),
            "kv-host exited with {status} on signal {signal}"
        );
        assert!(
            !std::path::Path::new(&host.region).exists(),
            "{} left behind after signal {signal}",
            host.region
        );
    }
}
