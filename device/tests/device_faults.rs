//! Whole-device faults and quarantine, through the real device code: an executor stall that is ridden out,
//! a halted kernel declared lost (and every message accounted for), a wedged actor that never acknowledges
//! a kill, and its slot given up on.

mod common;
use common::*;
use ringvisor_device::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn counter_device(slots: u32, lost_after: Option<Duration>) -> Device {
    let d = open_with(DeviceConfig::default().slots(slots).lost_after(lost_after));
    for s in 0..slots {
        d.create(s, "counter", &0i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    }
    d
}

fn an_executor_stall_stops_every_block_and_is_ridden_out() {
    let d = counter_device(4, Some(Duration::from_secs(30)));
    d.inject_device(DeviceFault::Stall).unwrap();
    std::thread::sleep(Duration::from_millis(20)); // a step already under way finishes
    let before = (d.stats().block0_heartbeat, d.snapshot(1).unwrap().heartbeat);
    // Neither a call nor a command makes progress while the executor is stalled.
    assert_eq!(d.call(1, &1i64.to_le_bytes(), Duration::from_millis(300)).unwrap_err(), DeviceError::Timeout);
    let kill = d.kill(2).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!((d.stats().block0_heartbeat, d.snapshot(1).unwrap().heartbeat), before, "heartbeats stopped");
    assert!(matches!(d.health(), DeviceHealth::Unresponsive(t) if t >= Duration::from_millis(250)), "{:?}", d.health());
    d.inject_device(DeviceFault::Resume).unwrap();
    assert_eq!(kill.wait_blocking(T).unwrap().event.kind, EventKind::Killed);
    // The call that timed out was still processed (its late reply goes to `replies`); the next one sees it.
    assert_eq!(i64_of(&d.call(1, &1i64.to_le_bytes(), T).unwrap()), 2);
    eventually("healthy again", || d.health() == DeviceHealth::Running);
}

fn a_halted_kernel_is_declared_lost_and_every_message_is_accounted_for() {
    let lost_after = Duration::from_millis(400);
    let d = counter_device(4, Some(lost_after));
    let events = d.subscribe();
    assert_eq!(i64_of(&d.call(0, &5i64.to_le_bytes(), T).unwrap()), 5);
    d.inject_device(DeviceFault::Halt).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // Messages sent to a halted kernel: nobody processes them.
    let mut sent = HashSet::new();
    for s in 0..4 {
        for _ in 0..3 {
            sent.insert(d.send(s, &1i64.to_le_bytes()).unwrap());
        }
    }
    let waiting = {
        let d = d.clone();
        std::thread::spawn(move || d.call(3, &1i64.to_le_bytes(), T))
    };
    let started = Instant::now();
    eventually("declared lost", || d.health() == DeviceHealth::Lost);
    let took = started.elapsed();
    assert!(took <= lost_after + Duration::from_secs(2), "lost after {took:?}");
    // The waiting call learns its message will never be processed.
    let err = waiting.join().unwrap().unwrap_err();
    assert!(matches!(err, DeviceError::Undelivered { slot: 3, reason: UndeliveredReason::DeviceLost, .. }), "{err}");
    // Every message sent after the halt is handed back exactly once, in a DeviceLost event of its slot.
    let mut handed = HashSet::new();
    let mut lost_slots = HashSet::new();
    while let Some(e) = events.recv_timeout(Duration::from_millis(100)) {
        if e.event.kind == EventKind::DeviceLost {
            lost_slots.insert(e.event.slot);
            for u in e.undelivered {
                assert_eq!(u.reason, UndeliveredReason::DeviceLost);
                assert!(handed.insert(u.envelope.correlation), "handed back twice");
            }
        }
    }
    assert_eq!(lost_slots, (0..4).collect::<HashSet<_>>());
    assert_eq!(handed.len(), sent.len() + 1, "the 12 sends and the call");
    assert!(sent.is_subset(&handed));
    assert!(events.is_closed(), "streams close with the device");
    // Everything afterwards fails with DeviceLost.
    assert_eq!(d.send(0, &[1; 8]).unwrap_err(), DeviceError::DeviceLost);
    assert_eq!(d.kill(0).unwrap_err(), DeviceError::DeviceLost);
    assert_eq!(d.inject_device(DeviceFault::Resume).unwrap_err(), DeviceError::DeviceLost);
}

fn a_device_without_lost_after_is_never_declared_lost() {
    let d = counter_device(1, None);
    d.inject_device(DeviceFault::Stall).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(matches!(d.health(), DeviceHealth::Unresponsive(_)));
    d.inject_device(DeviceFault::Resume).unwrap();
    assert_eq!(i64_of(&d.call(0, &3i64.to_le_bytes(), T).unwrap()), 3);
}

fn a_wedged_actor_never_acknowledges_a_kill_until_its_slot_is_quarantined() {
    let d = counter_device(3, Some(Duration::from_secs(30)));
    let events = d.subscribe_slot(1).unwrap();
    d.inject(1, SlotFault::Wedge).unwrap();
    let queued: Vec<u64> = (0..4).map(|_| d.send(1, &1i64.to_le_bytes()).unwrap()).collect();
    let kill = d.kill(1).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let snap = d.snapshot(1).unwrap();
    assert_eq!((snap.state, snap.messages_processed), (SlotState::Active, 0), "wedged: nothing happens");
    // Block 0 and the other slots are unaffected.
    assert_eq!(i64_of(&d.call(0, &2i64.to_le_bytes(), T).unwrap()), 2);
    assert!(matches!(d.restart(1, "counter", &[]), Err(DeviceError::CommandInFlight { slot: 1 })));

    d.quarantine(1).unwrap();
    assert_eq!(kill.wait_blocking(T).unwrap_err(), DeviceError::Quarantined { slot: 1 });
    let e = next_event(&events, EventKind::Quarantined);
    let handed: Vec<u64> = e.undelivered.iter().map(|u| u.envelope.correlation).collect();
    assert_eq!(handed, queued, "its queued messages are handed back, in order");
    assert!(e.undelivered.iter().all(|u| u.reason == UndeliveredReason::Quarantined));
    assert!(d.is_quarantined(1) && !d.is_quarantined(0));
    assert_eq!(d.send(1, &[0; 8]).unwrap_err(), DeviceError::Quarantined { slot: 1 });
    assert_eq!(d.restart(1, "counter", &[]).unwrap_err(), DeviceError::Quarantined { slot: 1 });
    d.quarantine(1).unwrap(); // idempotent: nothing handed back twice
    assert!(events.recv_timeout(Duration::from_millis(100)).is_none());
    assert_eq!(d.quarantine(9).unwrap_err(), DeviceError::SlotOutOfRange { slot: 9, slot_count: 3 });
    assert_eq!(i64_of(&d.call(2, &7i64.to_le_bytes(), T).unwrap()), 7);
}

/// A call waiting on a wedged actor is answered when its slot is quarantined: its message is handed back, and the
/// caller (a direct call: no waiter registered while it polls; one registered, or adopted, after) gets
/// `Undelivered`, not a timeout.
fn a_call_waiting_on_a_wedged_actor_is_answered_undelivered_when_its_slot_is_quarantined() {
    let d = counter_device(2, Some(Duration::from_secs(30)));
    d.inject(1, SlotFault::Wedge).unwrap();
    let caller = {
        let d = d.clone();
        std::thread::spawn(move || d.call(1, &1i64.to_le_bytes(), T))
    };
    eventually("the call's message is in the wedged actor's inbox", || d.inbox_pending(1).unwrap() == 1);
    d.quarantine(1).unwrap();
    let answer = caller.join().expect("caller");
    assert!(
        matches!(answer, Err(DeviceError::Undelivered { slot: 1, reason: UndeliveredReason::Quarantined, .. })),
        "{answer:?}"
    );
    assert_eq!(i64_of(&d.call(0, &4i64.to_le_bytes(), T).unwrap()), 4, "the other slot answers");
}

/// A wedge is aimed at the incarnation it strikes. One that stopped before it saw the bit (its kill acknowledged
/// first), or a bit set on a stopped slot, must not wedge the next incarnation: its create would never complete
/// and its start would wait out its timeout (seen in the chaos soak as slow convergence). A wedged running
/// actor still refuses its restart (above).
fn a_wedge_left_on_a_stopped_slot_does_not_wedge_its_next_incarnation() {
    let d = counter_device(2, Some(Duration::from_secs(30)));
    d.kill(1).unwrap().wait_blocking(T).unwrap();
    d.inject(1, SlotFault::Wedge).unwrap();
    let created = d.create(1, "counter", &5i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    assert_eq!((created.event.kind, created.event.generation), (EventKind::Created, 2));
    assert_eq!(i64_of(&d.call(1, &1i64.to_le_bytes(), T).unwrap()), 6, "the new incarnation runs");
    // the same for a failed slot restarted
    d.inject(1, SlotFault::CrashNextMessage).unwrap();
    assert!(d.call(1, &1i64.to_le_bytes(), T).is_err());
    eventually("failed", || d.snapshot(1).unwrap().state == SlotState::Failed);
    d.inject(1, SlotFault::Wedge).unwrap();
    d.restart(1, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    assert_eq!(i64_of(&d.call(1, &3i64.to_le_bytes(), T).unwrap()), 3);
}

fn a_halt_is_for_good_even_if_a_stall_ends_after_it() {
    let d = counter_device(1, Some(Duration::from_millis(300)));
    d.inject_device(DeviceFault::Stall).unwrap();
    d.inject_device(DeviceFault::Halt).unwrap();
    d.inject_device(DeviceFault::Resume).unwrap(); // ends the stall, not the halt
    eventually("declared lost", || d.health() == DeviceHealth::Lost);
}

/// A command that waits for room in a full command ring (block 0 stalled) holds no slot's lock meanwhile: a send
/// to its slot goes through while it waits (it used to wait for the command, up to the command timeout; and the
/// thread reading the device's events, which takes slots' locks, with it), and the command is carried out once
/// block 0 runs again.
fn a_command_waiting_for_room_in_the_command_ring_holds_up_no_send_to_its_slot() {
    let mut config = DeviceConfig::default().slots(8).command_capacity(4);
    config.command_timeout = Duration::from_secs(60); // the kill below never gives up while the test runs
    let d = open_with(config);
    d.create(0, "counter", &0i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    d.inject_device(DeviceFault::Stall).unwrap();
    let creates: Vec<PendingCommand> =
        (1..=4).map(|s| d.create(s, "counter", &0i64.to_le_bytes()).expect("room for four")).collect();
    let kill = {
        let d = d.clone();
        std::thread::spawn(move || d.kill(0)) // waits for room: the ring holds four commands block 0 does not take
    };
    std::thread::sleep(Duration::from_millis(100)); // (if the kill is not waiting yet, the send below proves less)
    d.send(0, &5i64.to_le_bytes()).expect("a send to the slot of a command waiting for room");
    assert!(!kill.is_finished(), "the kill still waits for room (block 0 is stalled)");
    d.inject_device(DeviceFault::Resume).unwrap();
    let killed = kill.join().unwrap().expect("submitted once block 0 made room");
    for create in creates {
        assert_eq!(create.wait_blocking(T).unwrap().event.kind, EventKind::Created);
    }
    let killed = killed.wait_blocking(T).unwrap();
    assert_eq!(killed.event.kind, EventKind::Killed);
}

on_every_backend!(
    a_command_waiting_for_room_in_the_command_ring_holds_up_no_send_to_its_slot,
    an_executor_stall_stops_every_block_and_is_ridden_out,
    a_halted_kernel_is_declared_lost_and_every_message_is_accounted_for,
    a_device_without_lost_after_is_never_declared_lost,
    a_wedged_actor_never_acknowledges_a_kill_until_its_slot_is_quarantined,
    a_call_waiting_on_a_wedged_actor_is_answered_undelivered_when_its_slot_is_quarantined,
    a_wedge_left_on_a_stopped_slot_does_not_wedge_its_next_incarnation,
    a_halt_is_for_good_even_if_a_stall_ends_after_it,
);
