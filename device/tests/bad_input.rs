//! Bad input at the boundary: the host refuses what it can check before writing anything, and the device
//! validates everything it reads, answering with an error event or error reply and changing nothing.

mod common;
use common::*;
use ringvisor_device::layout::*;
use ringvisor_device::*;
use std::time::Duration;

fn raw(op: u32, slot: u32, generation: u32, behaviour: u32, init_len: u32) -> RawCommand {
    RawCommand {
        op,
        slot,
        expected_generation: generation,
        behaviour,
        cmd_id: 0xC0FFEE,
        inbox_index: 0,
        init_len,
        init: [0; RV_INIT_BYTES as usize],
    }
}

fn states(d: &Device) -> Vec<(SlotState, u32)> {
    (0..d.slot_count()).map(|s| d.snapshot(s).map(|x| (x.state, x.generation)).unwrap()).collect()
}

fn host_refuses_bad_calls_before_writing_anything() {
    let d = open(4);
    let sent = d.stats().messages_sent;
    assert_eq!(d.create(4, "echo", &[]).unwrap_err(), DeviceError::SlotOutOfRange { slot: 4, slot_count: 4 });
    assert!(matches!(d.create(0, "nope", &[]), Err(DeviceError::UnknownBehaviour(_))));
    assert_eq!(d.create(0, "echo", &[0; 97]).unwrap_err(), DeviceError::PayloadTooLarge { len: 97, max: 96 });
    assert!(matches!(d.send(9, b"x"), Err(DeviceError::SlotOutOfRange { .. })));
    assert!(matches!(d.snapshot(9), Err(DeviceError::SlotOutOfRange { .. })));
    assert!(matches!(d.inject(9, SlotFault::Stall), Err(DeviceError::SlotOutOfRange { .. })));
    // a dormant slot has no actor to deliver to
    assert!(matches!(d.send(0, b"x"), Err(DeviceError::NotAccepting { slot: 0, state: SlotState::Dormant })));
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    assert_eq!(d.send(0, &[0; 97]).unwrap_err(), DeviceError::PayloadTooLarge { len: 97, max: 96 });
    assert_eq!(d.stats().messages_sent, sent, "nothing was written");
    assert!(matches!(Device::open(DeviceConfig::default().inbox_capacity(3)), Err(DeviceError::InvalidConfig(_))));
    assert!(matches!(Device::open(DeviceConfig::default().slots(0)), Err(DeviceError::InvalidConfig(_))));
    assert!(matches!(Device::open(DeviceConfig::default().state_bytes(100)), Err(DeviceError::InvalidConfig(_))));
    for bulk in [100, 1 << 25] {
        let config = DeviceConfig { bulk_bytes: bulk, ..DeviceConfig::default() };
        assert!(matches!(Device::open(config), Err(DeviceError::InvalidConfig(_))), "bulk_bytes {bulk}");
    }
}

/// A host-side check, the same on every backend; on the CPU backend only, because the two fake user behaviours
/// (a built-in's host function under new names) have no device source for NVRTC.
#[test]
fn a_behaviour_that_declares_more_state_than_a_slot_holds_is_refused_on_the_host() {
    // SAFETY: returns a pointer to a function of the linked kernel library.
    let host_fn = unsafe { ringvisor_device::ffi::rv_builtin_behaviour(2) }.expect("counter is linked");
    let big =
        UserBehaviour { name: "big", function: "big", host_fn, cuda_source: "", wgsl_source: "", state_bytes: 2048 };
    let fits =
        UserBehaviour { name: "fits", function: "fits", host_fn, cuda_source: "", wgsl_source: "", state_bytes: 1024 };
    let set = BehaviourSet::builtins().with(big).unwrap().with(fits).unwrap();
    let d = Device::open(DeviceConfig::default().slots(1).behaviours(set).backend(Backend::Cpu(CpuConfig::default())))
        .unwrap();
    let err = d.create(0, "big", &[]).unwrap_err();
    assert_eq!(err, DeviceError::StateTooSmall { behaviour: "big".into(), needs: 2048, has: 1024 });
    assert!(err.to_string().contains("DeviceConfig::state_bytes"), "{err}");
    assert_eq!(d.stats().commands_processed, 0, "nothing was written");
    d.create(0, "fits", &[]).unwrap().wait_blocking(T).unwrap();
    let err = d.restart(0, "big", &[]).unwrap_err();
    assert!(matches!(err, DeviceError::StateTooSmall { needs: 2048, .. }), "{err}");
}

fn full_inbox_is_an_error_or_a_bounded_wait_never_a_drop() {
    let d = open_with(DeviceConfig::default().slots(1).inbox_capacity(4));
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    d.inject(0, SlotFault::Stall).unwrap();
    for _ in 0..4 {
        d.send(0, &1i64.to_le_bytes()).unwrap();
    }
    assert_eq!(d.send(0, &1i64.to_le_bytes()).unwrap_err(), DeviceError::InboxFull { slot: 0 });
    let start = std::time::Instant::now();
    let err = d.send_timeout(0, &1i64.to_le_bytes(), Duration::from_millis(50)).unwrap_err();
    assert_eq!(err, DeviceError::InboxFull { slot: 0 });
    assert!(start.elapsed() >= Duration::from_millis(50));
    // once the actor runs again, a waiting sender gets through
    let d2 = d.clone();
    let waiter = std::thread::spawn(move || d2.send_timeout(0, &1i64.to_le_bytes(), T));
    std::thread::sleep(Duration::from_millis(20));
    d.inject(0, SlotFault::ClearStall).unwrap();
    waiter.join().unwrap().unwrap();
    eventually("all five processed", || d.snapshot(0).unwrap().messages_processed == 5);
    assert_eq!(d.stats().messages_sent, 5);
}

fn device_rejects_invalid_commands_and_changes_nothing() {
    let d = open(4);
    d.create(1, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    let events = d.subscribe();
    let before = states(&d);
    let cases = [
        (raw(RV_OP_CREATE, 4, 0, 1, 0), DeviceCode::SlotOutOfRange),
        (raw(RV_OP_CREATE, u32::MAX, 0, 1, 0), DeviceCode::SlotOutOfRange),
        (raw(RV_OP_CREATE, 0, 0, 200, 0), DeviceCode::UnknownBehaviour),
        (raw(RV_OP_CREATE, 0, 0, 0, 0), DeviceCode::UnknownBehaviour),
        (raw(RV_OP_KILL, 0, 0, 0, 0), DeviceCode::IllegalTransition),
        (raw(RV_OP_RESUME, 1, 1, 0, 0), DeviceCode::IllegalTransition),
        (raw(RV_OP_CREATE, 1, 1, 1, 0), DeviceCode::IllegalTransition),
        (raw(RV_OP_KILL, 1, 0, 0, 0), DeviceCode::StaleGeneration),
        (raw(RV_OP_RESTART, 1, 7, 2, 0), DeviceCode::StaleGeneration),
        (raw(99, 1, 1, 0, 0), DeviceCode::BadCommand),
        (raw(RV_OP_NONE, 1, 1, 0, 0), DeviceCode::BadCommand),
        (raw(RV_OP_CREATE, 0, 0, 1, 97), DeviceCode::BadCommand),
        (raw(RV_OP_RESTART, 1, 1, 2, u32::MAX), DeviceCode::BadCommand),
    ];
    for (cmd, code) in cases {
        d.submit_raw_command(cmd).unwrap();
        let e = next_event(&events, EventKind::Rejected);
        assert_eq!(e.event.code, Some(code), "command {cmd:?}");
        assert_eq!(e.event.cmd_id, 0xC0FFEE);
    }
    assert_eq!(states(&d), before, "no slot changed");
    assert_eq!(i64_of(&d.call(1, &2i64.to_le_bytes(), T).unwrap()), 2, "the running actor is unaffected");
}

fn stale_generation_and_illegal_transition_are_error_results_on_the_host() {
    let d = open(2);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let stale =
        CommandRequest { op: CommandOp::Kill, slot: 0, expected_generation: Some(0), behaviour: None, init: vec![] };
    assert_eq!(
        d.submit(stale).unwrap().wait_blocking(T).unwrap_err(),
        DeviceError::Rejected { slot: 0, code: DeviceCode::StaleGeneration }
    );
    assert_eq!(
        d.kill(1).unwrap().wait_blocking(T).unwrap_err(),
        DeviceError::Rejected { slot: 1, code: DeviceCode::IllegalTransition }
    );
    assert_eq!(
        d.resume(0).unwrap().wait_blocking(T).unwrap_err(),
        DeviceError::Rejected { slot: 0, code: DeviceCode::IllegalTransition }
    );
    // after a rejected kill the slot still accepts messages
    assert_eq!(d.call(0, b"ok", T).unwrap().payload().unwrap(), b"ok");
}

fn malformed_envelopes_get_an_error_reply_and_the_actor_keeps_running() {
    let d = open(2);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let base = |c: u64| Envelope::to_actor(0, c, b"abc", true).unwrap();
    d.send_envelope(0, base(1).with_raw_header(RV_KIND_REPLY as u8, 3, 0)).unwrap();
    d.send_envelope(0, base(2).with_raw_header(RV_KIND_USER as u8, 500, 0)).unwrap();
    d.send_envelope(0, base(3).with_raw_header(RV_KIND_USER as u8, 3, 1)).unwrap();
    let mut got: Vec<(u64, DeviceError)> = (0..3)
        .map(|_| d.replies().recv_timeout(T).unwrap())
        .map(|r| (r.correlation, r.payload().unwrap_err()))
        .collect();
    got.sort_by_key(|g| g.0);
    for (i, (c, e)) in got.iter().enumerate() {
        assert_eq!(*c, i as u64 + 1);
        assert!(matches!(e, DeviceError::ErrorReply { code: DeviceCode::BadEnvelope, .. }), "{e:?}");
    }
    let snap = d.snapshot(0).unwrap();
    assert_eq!((snap.state, snap.bad_envelopes, snap.messages_processed), (SlotState::Active, 3, 0));
    assert_eq!(d.call(0, b"fine", T).unwrap().payload().unwrap(), b"fine");
}

fn commands_and_messages_after_shutdown_are_refused() {
    let d = open(1);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let replies = d.replies();
    d.shutdown();
    assert_eq!(d.send(0, b"x").unwrap_err(), DeviceError::Closed);
    assert_eq!(d.kill(0).unwrap_err(), DeviceError::Closed);
    assert!(replies.recv_timeout(Duration::from_millis(10)).is_none(), "streams close");
}

on_every_backend!(
    host_refuses_bad_calls_before_writing_anything,
    full_inbox_is_an_error_or_a_bounded_wait_never_a_drop,
    device_rejects_invalid_commands_and_changes_nothing,
    stale_generation_and_illegal_transition_are_error_results_on_the_host,
    malformed_envelopes_get_an_error_reply_and_the_actor_keeps_running,
    commands_and_messages_after_shutdown_are_refused,
);
