//! Helpers shared by the device integration tests.
#![allow(dead_code)]

use ringvisor_device::*;
use std::time::{Duration, Instant};

pub const T: Duration = Duration::from_secs(10);

pub fn open(slots: u32) -> Device {
    Device::open(DeviceConfig::default().slots(slots)).expect("device opens")
}

pub fn open_with(config: DeviceConfig) -> Device {
    Device::open(config).expect("device opens")
}

pub fn i64_of(reply: &Reply) -> i64 {
    i64::from_le_bytes(reply.payload().expect("a reply, not an error")[..8].try_into().unwrap())
}

/// test-behaviour message: op + u32 argument + u64 argument.
pub fn test_msg(op: u32, arg: u32, wide: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&op.to_le_bytes());
    v.extend_from_slice(&arg.to_le_bytes());
    v.extend_from_slice(&wide.to_le_bytes());
    v
}

pub const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// Waits until `f` holds, or panics after `T`.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The next event of `stream` whose kind is `kind`.
pub fn next_event(stream: &Stream<SlotEvent>, kind: EventKind) -> SlotEvent {
    let deadline = Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = stream.recv_timeout(left).unwrap_or_else(|| panic!("no {kind:?} event"));
        if e.event.kind == kind {
            return e;
        }
    }
}
