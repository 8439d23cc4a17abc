//! A behaviour that never returns: a real endless loop in user code (the `test` behaviour's op 6, a spin on a
//! state word nothing writes), not the wedge bit the device code honours. On the CPU backend the worker running
//! it is lost for good; what must hold is that it takes nothing else with it: the other slots of its run-set
//! word answer, and the device shuts down within a bound (the stuck worker abandoned, its memory kept for it).
//! (Its own test binary: the spinning thread keeps a core busy until the process exits.)

mod common;
use common::*;
use ringvisor_device::*;
use std::time::{Duration, Instant};

#[test]
fn cpu_a_behaviour_that_never_returns_holds_its_slot_alone_and_shutdown_is_bounded() {
    let cpu = CpuConfig { workers: 2, ..CpuConfig::default() };
    let d = Device::open(DeviceConfig::default().slots(32).backend(Backend::Cpu(cpu))).unwrap();
    for slot in 0..4 {
        d.create(slot, "test", &[]).unwrap().wait_blocking(T).unwrap();
    }
    d.send(1, &test_msg(6, 0, 0)).unwrap(); // slot 1 spins for good
    eventually("slot 1 to be stuck in its behaviour", || {
        let before = d.snapshot(1).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let after = d.snapshot(1).unwrap();
        after.inbox.0 == before.inbox.0 && after.messages_processed == 0 && after.inbox.1 == 1
    });
    // its neighbours in the same word of 32 slots answer, again and again, on the worker that is left
    for round in 0..200u32 {
        for slot in [0, 2, 3] {
            let msg = test_msg(1, round, u64::from(slot));
            let reply = d.call(slot, &msg, T).unwrap_or_else(|e| panic!("slot {slot}, round {round}: {e}"));
            assert_eq!(reply.payload().unwrap(), &msg[..]);
        }
    }
    // a message queued behind the stuck one waits: it is neither processed nor lost
    d.send(1, &test_msg(1, 0, 0)).unwrap();
    let started = Instant::now();
    d.shutdown();
    assert!(started.elapsed() < Duration::from_secs(10), "shutdown took {:?}", started.elapsed());
    // neither the message the behaviour is stuck in nor the one behind it was processed: both handed back
    assert_eq!(d.stats().undelivered_left_in_inbox, 2);
    drop(d);
}
