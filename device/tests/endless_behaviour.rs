//! A behaviour that never returns: a real endless loop in user code (the `test` behaviour's op 6, a spin on a
//! state word nothing writes), not the wedge bit the device code honours. On the CPU backend the worker running
//! it is lost for good; what must hold is that it takes nothing else with it: the other slots of its run-set
//! word answer, and the device shuts down within a bound (the stuck worker abandoned, its memory kept for it).
//! (Its own test binary: the spinning thread keeps a core busy until the process exits.)

mod common;
use common::*;
use ringvisor_device::*;
use std::time::{Duration, Instant};

/// Waits until `slot`'s one message has stayed unprocessed for 20 ms (its step does not return; or, on a
/// machine too busy to have run it yet, has not started).
fn wait_until_stuck(d: &Device, slot: u32) {
    eventually("the slot to be stuck in its behaviour", || {
        let before = d.snapshot(slot).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let after = d.snapshot(slot).unwrap();
        after.inbox.0 == before.inbox.0 && after.messages_processed == 0 && after.inbox.1 == 1
    });
}

#[test]
fn cpu_a_behaviour_that_never_returns_holds_its_slot_alone_and_shutdown_is_bounded() {
    let cpu = CpuConfig { workers: 2, ..CpuConfig::default() };
    let d = Device::open(DeviceConfig::default().slots(32).backend(Backend::Cpu(cpu))).unwrap();
    for slot in 0..4 {
        d.create(slot, "test", &[]).unwrap().wait_blocking(T).unwrap();
    }
    d.send(1, &test_msg(6, 0, 0)).unwrap(); // slot 1 spins for good
    wait_until_stuck(&d, 1);
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

/// Devices with the same CPU settings share one pool of workers (a call forwarded between them runs on the worker
/// that is awake). A behaviour that never returns on one of them holds the pool's only worker: within the
/// stuck-worker bound a new worker takes its place, so the other device keeps answering, and so do the stuck
/// device's other slots; shutting the stuck device down is bounded and leaves the other one running.
#[test]
fn cpu_a_stuck_worker_of_a_shared_pool_is_replaced_and_the_other_devices_keep_answering() {
    // a worker count no other test of this binary uses: this test's devices have a pool of their own
    let cpu = CpuConfig { workers: 1, spin_sweeps: 9, ..CpuConfig::default() };
    let config = || DeviceConfig::default().slots(4).backend(Backend::Cpu(cpu.clone()));
    let (stuck, other) = (Device::open(config()).unwrap(), Device::open(config()).unwrap());
    assert!(stuck.describe().contains("1 workers shared by 2 device(s)"), "{}", stuck.describe());
    for d in [&stuck, &other] {
        for slot in 0..2 {
            d.create(slot, "test", &[]).unwrap().wait_blocking(T).unwrap();
        }
    }
    stuck.send(1, &test_msg(6, 0, 0)).unwrap(); // the pool's one worker spins in slot 1 for good
                                                // both devices answer again once the stuck worker is replaced (its step never returns)
    for (name, d) in [("other", &other), ("stuck", &stuck)] {
        for round in 0..50u32 {
            let msg = test_msg(1, round, 0);
            let reply = d.call(0, &msg, T).unwrap_or_else(|e| panic!("{name} device, round {round}: {e}"));
            assert_eq!(reply.payload().unwrap(), &msg[..]);
        }
    }
    let started = Instant::now();
    stuck.shutdown();
    assert!(started.elapsed() < Duration::from_secs(10), "shutdown took {:?}", started.elapsed());
    drop(stuck);
    // the pool goes on for the device left in it
    for round in 0..50u32 {
        let msg = test_msg(1, round, 1);
        assert_eq!(other.call(1, &msg, T).unwrap().payload().unwrap(), &msg[..]);
    }
    assert!(other.describe().contains("shared by 1 device(s)"), "{}", other.describe());
    other.shutdown();
}

/// The stuck-worker bound is the user's (`CpuConfig::stuck_after`): under a bound of an hour, a worker in a step
/// that does not return is not replaced, so the pool's only worker serves no other slot (a call there times out)
/// while the shutdown is still bounded; a bound under a millisecond is refused at open.
#[test]
fn cpu_a_worker_is_replaced_only_after_the_configured_bound() {
    // a worker count no other test of this binary uses: this test's device has a pool of its own
    let cpu = CpuConfig { workers: 1, spin_sweeps: 7, stuck_after: Duration::from_secs(3600), ..CpuConfig::default() };
    let d = Device::open(DeviceConfig::default().slots(2).backend(Backend::Cpu(cpu.clone()))).unwrap();
    for slot in 0..2 {
        d.create(slot, "test", &[]).unwrap().wait_blocking(T).unwrap();
    }
    let before = test_msg(1, 0, 0);
    assert_eq!(d.call(0, &before, T).unwrap().payload().unwrap(), &before[..]);
    d.send(1, &test_msg(6, 0, 0)).unwrap(); // the only worker spins in slot 1 for good
    wait_until_stuck(&d, 1);
    // once the worker is in slot 1's step no call is served (a first one may be, if the worker had not started
    // that step yet: the wait above cannot tell the two apart)
    let times_out =
        |round| matches!(d.call(0, &test_msg(1, round, 0), Duration::from_millis(600)), Err(DeviceError::Timeout));
    assert!(times_out(1) || times_out(2), "no worker is left for slot 0 while the stuck one is within its bound");
    assert!(times_out(3), "still none");
    let started = Instant::now();
    d.shutdown();
    assert!(started.elapsed() < Duration::from_secs(10), "shutdown took {:?}", started.elapsed());

    let too_short = CpuConfig { stuck_after: Duration::from_micros(500), ..cpu };
    let refused = Device::open(DeviceConfig::default().slots(2).backend(Backend::Cpu(too_short)));
    assert!(
        matches!(refused, Err(DeviceError::InvalidConfig(ref m)) if m.contains("stuck_after")),
        "{:?}",
        refused.err()
    );
}

/// Devices whose CPU settings differ have pools of their own.
#[test]
fn cpu_devices_with_other_settings_have_pools_of_their_own() {
    let pool_of = |spin_sweeps| {
        let cpu = CpuConfig { workers: 3, spin_sweeps, ..CpuConfig::default() };
        Device::open(DeviceConfig::default().slots(2).backend(Backend::Cpu(cpu))).unwrap()
    };
    let (a, b) = (pool_of(10), pool_of(11));
    assert!(a.describe().contains("3 workers shared by 1 device(s)"), "{}", a.describe());
    assert!(b.describe().contains("3 workers shared by 1 device(s)"), "{}", b.describe());
    let c = pool_of(10);
    assert!(c.describe().contains("3 workers shared by 2 device(s)"), "{}", c.describe());
}

/// On the CUDA backend (the emulated driver): a block stuck in a behaviour never agrees to a pause, so another
/// device's open fails after the pause wait; the other blocks of the first device's kernel had agreed, and go on
/// when the pause is withdrawn: block 0 still carries out commands and the other slots answer. (The blocks once
/// left one by one at a pause: block 0 was gone for good, and no command was carried out again.)
#[test]
fn cuda_emulated_a_block_stuck_in_a_behaviour_keeps_the_rest_of_its_kernel_through_a_failed_pause() {
    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    let open = || {
        let cuda = CudaConfig { driver: CudaDriver::Emulated(gpu.clone()), ..CudaConfig::default() };
        // two slots on blocks of their own (the emulated GPU has room for three blocks of this grid)
        Device::open(DeviceConfig::default().slots(2).lost_after(None).backend(Backend::Cuda(cuda)))
    };
    let first = open().unwrap();
    first.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    first.send(0, &test_msg(6, 0, 0)).unwrap(); // slot 0's block spins for good
    wait_until_stuck(&first, 0);
    let err = open().unwrap_err();
    assert!(err.to_string().contains("did not pause"), "{err}");
    first.create(1, "counter", &1i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    assert_eq!(i64_of(&first.call(1, &2i64.to_le_bytes(), T).unwrap()), 3);
    assert_eq!(gpu.violations(), Vec::<String>::new());
    // its kernel cannot leave: the shutdown abandons it within its bound
    let started = Instant::now();
    drop(first);
    assert!(started.elapsed() < Duration::from_secs(30), "shutdown took {:?}", started.elapsed());
}
