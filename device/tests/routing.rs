//! Kernel-to-kernel messages between devices, routed through the host (`Router`): delivery, forwarded calls,
//! backpressure, and what becomes of every message that cannot be delivered, on every backend.

mod common;
use common::*;
use ringvisor_device::layout::{RV_HOST_ENDPOINT, RV_KIND_K2K};
use ringvisor_device::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Two devices attached to one router as devices 0 and 1, and what the router reported unroutable.
fn pair(slots: u32, router: Router, second: DeviceConfig) -> (Device, Device, Arc<Mutex<Vec<Unroutable>>>) {
    let a = open(slots);
    let b = open_with(second);
    router.attach(0, &a).unwrap();
    router.attach(1, &b).unwrap();
    let letters = Arc::new(Mutex::new(Vec::new()));
    let sink = letters.clone();
    router.on_unroutable(move |u| sink.lock().unwrap().push(u));
    (a, b, letters)
}

/// A `test` message forwarding `inner` to `address`.
fn forward(address: u32, inner: &[u8]) -> Vec<u8> {
    let mut msg = test_msg(4, address, 0)[..8].to_vec();
    msg.extend_from_slice(inner);
    msg
}

fn at(device: u32, slot: u32) -> u32 {
    routed_address(device, slot).expect("an address in range")
}

fn a_forwarded_call_is_answered_by_an_actor_on_another_device() {
    let (a, b, letters) = pair(2, Router::new(), DeviceConfig::default().slots(4));
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    b.create(3, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let r = a.call(0, &forward(at(1, 3), &test_msg(1, 77, 0)), T).unwrap();
    assert_eq!((r.slot, r.generation), (3, 1), "answered by device 1's slot 3");
    assert_eq!(&r.payload().unwrap()[4..8], &77u32.to_le_bytes());
    assert_eq!(a.snapshot(0).unwrap().k2k.0, 1, "counted as sent by the sender");
    assert_eq!(b.snapshot(3).unwrap().k2k.1, 1, "counted as received by the receiver");
    assert_eq!((a.stats().routed_out, b.stats().routed_in, a.stats().unroutable), (1, 1, 0));
    // the same address reaches an actor on the sender's own device too
    a.create(1, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let r = a.call(0, &forward(at(0, 1), &test_msg(1, 5, 0)), T).unwrap();
    assert_eq!(r.slot, 1);
    assert!(letters.lock().unwrap().is_empty());
}

fn one_way_routed_sends_are_delivered_once_each_through_a_small_inbox() {
    // an inbox of 2 on the receiver: most sends wait in the sender's outbox for room (backpressure)
    let (a, b, letters) = pair(1, Router::new(), DeviceConfig::default().slots(1).inbox_capacity(2));
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    b.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    let n = 300u64;
    for i in 1..=n {
        a.send_timeout(0, &forward(at(1, 0), &i.to_le_bytes()), T).unwrap();
    }
    eventually("every routed send delivered", || b.snapshot(0).unwrap().k2k.1 == n as u32);
    let total = i64_of(&b.call(0, &0i64.to_le_bytes(), T).unwrap());
    assert_eq!(total, (n * (n + 1) / 2) as i64, "each delta added exactly once");
    assert_eq!(a.snapshot(0).unwrap().k2k.0, n as u32);
    assert_eq!((a.stats().routed_out, b.stats().routed_in, a.stats().unroutable), (n, n, 0));
    assert!(letters.lock().unwrap().is_empty());
}

fn an_undeliverable_routed_message_is_reported_once_and_fails_the_call_it_answers() {
    let (a, b, letters) = pair(1, Router::new(), DeviceConfig::default().slots(2));
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    b.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let cases = [
        (at(1, 1), UnroutableReason::NotRunning), // a slot with no actor
        (at(1, 2), UnroutableReason::NoSlot),     // past the device's slots
        (at(9, 0), UnroutableReason::NoDevice),   // no device 9
    ];
    for (address, reason) in cases {
        let got = a.call(0, &forward(address, &test_msg(1, 1, 0)), T);
        let (device, slot) = (address >> 24 & 0x7F, address & 0xFF_FFFF);
        assert_eq!(got.unwrap_err(), DeviceError::Unroutable { device, slot, reason });
    }
    // a one-way send too: no caller to fail, a report all the same
    a.send_timeout(0, &forward(at(1, 1), &test_msg(1, 2, 0)), T).unwrap();
    eventually("four reports", || letters.lock().unwrap().len() == 4);
    let got = letters.lock().unwrap().clone();
    let reasons: Vec<_> = got.iter().map(|u| u.reason).collect();
    use UnroutableReason::*;
    assert_eq!(reasons, [NotRunning, NoSlot, NoDevice, NotRunning]);
    let last = &got[3];
    assert_eq!((last.from_device, last.from_slot, last.to_device, last.to_slot), (0, 0, 1, 1));
    assert_eq!(&last.envelope.payload()[4..8], &2u32.to_le_bytes(), "the message as sent");
    assert_eq!((a.stats().routed_out, a.stats().unroutable, b.stats().routed_in), (0, 4, 0));
    // the sender keeps running; an address the device code refuses is answered by the sender itself
    let refused = a.call(0, &forward(RV_HOST_ENDPOINT, &test_msg(1, 1, 0)), T);
    assert!(matches!(refused, Err(DeviceError::ErrorReply { code: DeviceCode::SlotOutOfRange, .. })), "{refused:?}");
    assert_eq!(a.snapshot(0).unwrap().state, SlotState::Active);
}

fn a_device_with_no_router_reports_its_routed_messages_unroutable() {
    let a = open(2);
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    a.create(1, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let got = a.call(0, &forward(at(0, 1), &test_msg(1, 1, 0)), T);
    assert_eq!(got.unwrap_err(), DeviceError::Unroutable { device: 0, slot: 1, reason: UnroutableReason::NoRouter });
    assert_eq!(a.stats().unroutable, 1);
    assert_eq!(a.snapshot(1).unwrap().messages_processed, 0, "never delivered");
}

fn a_routed_message_its_receiver_crashes_on_is_handed_back_with_its_sender() {
    let (a, b, _letters) = pair(1, Router::new(), DeviceConfig::default().slots(1));
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    b.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let events = b.subscribe();
    let got = a.call(0, &forward(at(1, 0), &POISON.to_le_bytes()), T);
    assert!(
        matches!(got, Err(DeviceError::Undelivered { slot: 0, reason: UndeliveredReason::InFlightAtCrash, .. })),
        "the forwarded call is failed like a call to the receiver: {got:?}"
    );
    let failed = next_event(&events, EventKind::Failed);
    assert_eq!(failed.event.code, Some(DeviceCode::Poison));
    let [u] = &failed.undelivered[..] else { panic!("one message handed back: {:?}", failed.undelivered) };
    assert_eq!(u.envelope.sender(), Endpoint::Routed { device: 0, slot: 0 });
    assert_eq!(u.envelope.kind, RV_KIND_K2K as u8);
    assert_eq!(b.snapshot(0).unwrap().k2k.1, 0, "not counted as received");
}

fn a_routed_message_waits_for_room_up_to_the_hold_limit() {
    let router = Router::with_hold_limit(Duration::from_millis(50));
    let (a, b, letters) = pair(1, router, DeviceConfig::default().slots(1).inbox_capacity(2));
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    b.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    // the receiver takes nothing while stalled: its inbox of 2 fills, each later send waits, then is given up on
    b.inject(0, SlotFault::Stall).unwrap();
    let n = 5u32;
    for i in 0..n {
        a.send_timeout(0, &forward(at(1, 0), &test_msg(1, i, 0)), T).unwrap();
    }
    eventually("every send accounted", || a.stats().routed_out + a.stats().unroutable == n as u64);
    let stats = a.stats();
    assert_eq!(stats.routed_out, 2, "two fitted the receiver's inbox: {stats:?}");
    assert_eq!(b.stats().routed_in, 2);
    let reasons: Vec<_> = letters.lock().unwrap().iter().map(|u| u.reason).collect();
    assert_eq!(reasons, vec![UnroutableReason::InboxFull; 3]);
    // after the stall the two delivered ones are processed: nothing lost, nothing twice
    b.inject(0, SlotFault::ClearStall).unwrap();
    eventually("the delivered ones processed", || b.snapshot(0).unwrap().k2k.1 == 2);
}

fn every_forwarded_call_to_a_lost_device_ends_once() {
    // device 1 halts and is declared lost while calls flow through device 0 to it: each call is answered,
    // or ends once with the reason (handed back from the lost device's inbox, or not deliverable to it)
    let lossy = DeviceConfig::default().slots(1).lost_after(Some(Duration::from_millis(200)));
    let (a, b, letters) = pair(1, Router::new(), lossy);
    a.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    b.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let n = 40u32;
    let (mut answered, mut handed_back, mut not_delivered) = (0, 0, 0);
    for i in 0..n {
        if i == 10 {
            b.inject_device(DeviceFault::Halt).unwrap();
        }
        match a.call(0, &forward(at(1, 0), &test_msg(1, i, 0)), T) {
            Ok(r) => {
                assert_eq!(&r.payload().unwrap()[4..8], &i.to_le_bytes());
                assert_eq!(answered, i, "only calls before the loss are answered");
                answered += 1;
            }
            Err(DeviceError::Undelivered { reason: UndeliveredReason::DeviceLost, .. }) => handed_back += 1,
            Err(DeviceError::Unroutable { reason: UnroutableReason::DeviceGone, .. }) => not_delivered += 1,
            Err(e) => panic!("call {i}: {e:?}"),
        }
    }
    // the calls before the halt (and at most the one sent as it took effect)
    assert!((10..=11).contains(&answered), "{answered}");
    assert_eq!(b.health(), DeviceHealth::Lost);
    assert_eq!(answered + handed_back + not_delivered, n);
    assert!(not_delivered > 0, "after the loss nothing is delivered");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.routed_out + sa.unroutable, n as u64, "{sa:?}");
    assert_eq!(sb.routed_in, sa.routed_out);
    assert_eq!(letters.lock().unwrap().len(), not_delivered as usize, "each reported once");
    // the sender's device is untouched
    assert_eq!(a.snapshot(0).unwrap().state, SlotState::Active);
    assert_eq!(a.health(), DeviceHealth::Running);
}

on_every_backend!(
    every_forwarded_call_to_a_lost_device_ends_once,
    a_forwarded_call_is_answered_by_an_actor_on_another_device,
    one_way_routed_sends_are_delivered_once_each_through_a_small_inbox,
    an_undeliverable_routed_message_is_reported_once_and_fails_the_call_it_answers,
    a_device_with_no_router_reports_its_routed_messages_unroutable,
    a_routed_message_its_receiver_crashes_on_is_handed_back_with_its_sender,
    a_routed_message_waits_for_room_up_to_the_hold_limit,
);
