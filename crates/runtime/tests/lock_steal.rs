//! A control plane that dies holding a map's writer lock does not wedge the map: a real
//! process takes the lock, leaves a half-done write behind and is killed; another control
//! plane then breaks the lock, repairs the map and proceeds, and readers never see the
//! half-written data.

mod common;

use common::{Host, Node};
use rdx_region::layout::{MapType, SectionId, ELEM_BUSY, ELEM_STATE_MASK};
use rdx_transport::shm::ShmTransport;
use rdx_transport::xstate::{
    self, array, control_plane_token, hash_key, next_ctl, Copies, MapError, MapRef, MapSpec,
    UPDATE_ANY,
};
use rdx_transport::Transport;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "RDX_LOCK_STEAL_CHILD";

fn spec(map_type: MapType, key: u32, value: u32, name: &str) -> MapSpec {
    MapSpec {
        map_type,
        key_size: key,
        value_size: value,
        max_entries: 16,
        flags: 0,
        name: name.into(),
    }
}

/// Region offset of the hash element that holds `key` (the first probe; the test's keys do
/// not collide in a 32-bucket table, which the parent checks by reading the key back).
fn hash_element(m: &MapRef, key: &[u8]) -> u64 {
    m.data + (hash_key(key) & (m.buckets as u64 - 1)) * m.entry_stride as u64
}

/// The doomed control plane, run in a child process by `dead_holders_lock_is_broken`:
/// takes both maps' locks, starts a write in each and stops halfway, then waits to be killed.
#[test]
#[ignore = "child process of dead_holders_lock_is_broken"]
fn lock_holder_child() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut it = arg.split(',');
    let path = it.next().unwrap();
    let hash_at: u64 = it.next().unwrap().parse().unwrap();
    let array_at: u64 = it.next().unwrap().parse().unwrap();
    let t = ShmTransport::open(path).unwrap();
    let h = MapRef::read(&t, hash_at).unwrap();
    let a = MapRef::read(&t, array_at).unwrap();
    let token = control_plane_token(std::process::id());
    xstate::lock(&t, &h, token).unwrap();
    xstate::lock(&t, &a, token).unwrap();
    // Hash: the element of key 5 marked busy, its value half overwritten.
    let e = hash_element(&h, &5u64.to_le_bytes());
    let c = t.read_u64(e).unwrap();
    t.write_u64(e, next_ctl(c, ELEM_BUSY)).unwrap();
    t.write_u64(e + 16, 0xdead).unwrap();
    // Array: element 3's sequence word odd, the first word of its value overwritten.
    let s = array::seq_word(&a, 3, 0);
    t.write_u64(s, t.read_u64(s).unwrap() + 1).unwrap();
    t.write_u64(a.data + 3 * a.value_stride as u64, 0xdead)
        .unwrap();
    println!("locked");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

#[test]
fn dead_holders_lock_is_broken() {
    let host = Host::start(&[]);
    let node = Node::attach(&host);
    let t = &node.t;
    let info = t.info().clone();
    let scratch = info.section(SectionId::Scratch).offset + info.scratch_reserved;
    let h = xstate::create(t, &info, 1, scratch, &spec(MapType::Hash, 8, 8, "h")).unwrap();
    let array_at = scratch + 64 * 1024;
    let a = xstate::create(t, &info, 2, array_at, &spec(MapType::Array, 4, 24, "a")).unwrap();
    let me = control_plane_token(std::process::id());
    for k in [5u64, 6] {
        xstate::update(
            t,
            &h,
            &k.to_le_bytes(),
            &k.to_le_bytes(),
            UPDATE_ANY,
            Copies::All,
            me,
        )
        .unwrap();
        let mut key = [0u8; 8];
        t.read(hash_element(&h, &k.to_le_bytes()) + 8, &mut key)
            .unwrap();
        assert_eq!(
            u64::from_le_bytes(key),
            k,
            "key {k} is not in its first probe"
        );
    }
    let wide: Vec<u8> = (0..24).collect();
    xstate::update(
        t,
        &a,
        &3u32.to_le_bytes(),
        &wide,
        UPDATE_ANY,
        Copies::All,
        me,
    )
    .unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock_holder_child", "--ignored", "--nocapture"])
        .env(
            CHILD_ENV,
            format!("{},{},{}", host.path, h.offset, a.offset),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("locked") {
        line.clear();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "child exited early");
    }
    // Locked by a live control plane: not breakable, and readers refuse the busy element
    // rather than return the half-written value.
    let holder = t
        .read_u64(h.offset + rdx_region::layout::offsets::MAP_LOCK)
        .unwrap();
    assert!(!xstate::lock_breakable(t, holder));
    let mut v = [0u8; 24];
    let e5 = hash_element(&h, &5u64.to_le_bytes());
    assert_eq!(t.read_u64(e5).unwrap() & ELEM_STATE_MASK, ELEM_BUSY);

    child.kill().unwrap();
    child.wait().unwrap();
    assert!(xstate::lock_breakable(t, holder), "holder is dead");

    // The next writer breaks the lock, repairs and proceeds.
    xstate::update(
        t,
        &h,
        &7u64.to_le_bytes(),
        &7u64.to_le_bytes(),
        UPDATE_ANY,
        Copies::All,
        me,
    )
    .unwrap();
    assert!(matches!(
        xstate::lookup(t, &h, &5u64.to_le_bytes(), &mut v),
        Ok(false)
    ));
    assert!(xstate::lookup(t, &h, &6u64.to_le_bytes(), &mut v).unwrap());
    assert_eq!(&v[..8], &6u64.to_le_bytes());
    assert_eq!(xstate::keys(t, &h).unwrap().len(), 2);
    assert_eq!(
        t.read_u64(h.offset + rdx_region::layout::offsets::MAP_COUNT)
            .unwrap(),
        2
    );
    assert_eq!(
        t.read_u64(h.offset + rdx_region::layout::offsets::MAP_LOCK)
            .unwrap(),
        0
    );

    // The array's lock too; its value was whole before and is whole after the next write.
    let newer: Vec<u8> = (100..124).collect();
    xstate::update(
        t,
        &a,
        &3u32.to_le_bytes(),
        &newer,
        UPDATE_ANY,
        Copies::All,
        me,
    )
    .unwrap();
    assert!(xstate::lookup(t, &a, &3u32.to_le_bytes(), &mut v).unwrap());
    assert_eq!(&v[..], &newer[..]);
    assert!(matches!(
        xstate::delete(t, &a, &3u32.to_le_bytes(), me),
        Err(MapError::Invalid(_))
    ));
}
