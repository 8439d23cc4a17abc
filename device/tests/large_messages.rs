//! Payloads over one envelope's 96 bytes (`DeviceConfig::bulk_bytes`): host to actor, actor to host and actor to
//! actor, with the same exactly-once accounting as small ones (processed, answered, or handed back whole) and
//! the same validation at the device boundary (a reference outside the slot's area is a bad envelope).

mod common;
use common::*;
use ringvisor_device::layout::{RV_FLAG_BULK, RV_KIND_USER};
use ringvisor_device::*;

/// `len` bytes that differ from one message to the next (`seed`) and along the message.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed.wrapping_mul(7)) as u8).collect()
}

/// A test-behaviour message: `op`, `arg`, then `body`.
fn op_msg(op: u32, arg: u32, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + body.len());
    v.extend_from_slice(&op.to_le_bytes());
    v.extend_from_slice(&arg.to_le_bytes());
    v.extend_from_slice(body);
    v
}

fn large_calls_round_trip_whole_through_the_bulk_areas() {
    let d = open_with(DeviceConfig::default().slots(2).bulk_bytes(64 * 1024));
    assert_eq!(d.max_payload(), 64 * 1024);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    // every size class, small and large mixed, the largest the device takes included; 4 KiB messages lap the
    // 64 KiB areas several times
    let mut sizes = vec![0, 1, 95, 96, 97, 1000, 4096, 65_535, 65_536, 96, 5000];
    sizes.extend(std::iter::repeat_n(4096, 40));
    for (i, len) in sizes.into_iter().enumerate() {
        let payload = pattern(len, i as u32);
        let reply = d.call(0, &payload, T).unwrap();
        assert_eq!(reply.payload().unwrap(), &payload[..], "message {i} of {len} bytes");
        assert_eq!(reply.envelope().is_large(), len > PAYLOAD_BYTES);
    }
    assert_eq!(d.snapshot(0).unwrap().messages_processed, 51);
}

fn one_way_large_sends_wait_for_bulk_room_and_all_arrive() {
    // an area of 4 KiB holds one 3,000-byte message at a time: each send waits for the one before
    let d = open_with(DeviceConfig::default().slots(1).bulk_bytes(4096));
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    d.inject(0, SlotFault::Stall).unwrap();
    d.send(0, &pattern(3000, 1)).unwrap();
    // a free cell but no bulk room: refused at once, nothing written
    assert!(matches!(d.send(0, &pattern(3000, 2)), Err(DeviceError::InboxFull { slot: 0 })));
    assert!(matches!(d.send_batch(0, &[pattern(3000, 2)]), Err(DeviceError::InboxFull { slot: 0 })));
    // small messages still go
    d.send(0, b"small").unwrap();
    d.inject(0, SlotFault::ClearStall).unwrap();
    for i in 0..30 {
        d.send_timeout(0, &pattern(3000, i), T).unwrap();
    }
    eventually("every message processed", || d.snapshot(0).unwrap().messages_processed == 32);
    assert_eq!(d.stats().undelivered_left_in_inbox, 0);
}

fn queued_and_poison_large_messages_are_handed_back_whole() {
    let d = open_with(DeviceConfig::default().slots(2).bulk_bytes(16 * 1024));
    let events = d.subscribe_slot(1).unwrap();
    d.create(1, "test", &[]).unwrap().wait_blocking(T).unwrap();
    d.inject(1, SlotFault::Stall).unwrap();
    let mut poison = POISON.to_le_bytes().to_vec();
    poison.extend(pattern(5000, 9));
    let poison_id = d.send(1, &poison).unwrap();
    let queued: Vec<Vec<u8>> = (0..2).map(|i| op_msg(1, 0, &pattern(3000, i))).collect();
    let queued_ids: Vec<u64> = queued.iter().map(|m| d.send(1, m).unwrap()).collect();
    d.inject(1, SlotFault::ClearStall).unwrap();
    let failed = next_event(&events, EventKind::Failed);
    assert_eq!(failed.event.code, Some(DeviceCode::Poison));
    let back = &failed.undelivered[0];
    assert_eq!((back.envelope.correlation, back.reason), (poison_id, UndeliveredReason::InFlightAtCrash));
    assert_eq!(back.envelope.payload(), &poison[..], "the poison message comes back whole");
    let r = d.restart(1, "test", &[]).unwrap().wait_blocking(T).unwrap();
    let got: Vec<(u64, &[u8])> = r.undelivered.iter().map(|u| (u.envelope.correlation, u.envelope.payload())).collect();
    let want: Vec<(u64, &[u8])> = queued_ids.iter().copied().zip(queued.iter().map(|m| &m[..])).collect();
    assert_eq!(got, want, "the rest come back whole, in order, at the restart");
    // the area was freed with the cells: the new incarnation takes large messages again
    let m = op_msg(1, 0, &pattern(12_000, 3));
    assert_eq!(d.call(1, &m, T).unwrap().payload().unwrap(), &m[..]);
    assert_eq!(d.stats().undelivered_in_flight + d.stats().undelivered_left_in_inbox, 3);
}

fn killed_with_large_messages_queued_hands_them_back_whole() {
    let d = open_with(DeviceConfig::default().slots(1).bulk_bytes(64 * 1024));
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    d.inject(0, SlotFault::Stall).unwrap();
    let sent: Vec<Vec<u8>> = (0..6).map(|i| pattern(if i % 2 == 0 { 9000 } else { 40 }, i)).collect();
    let ids: Vec<u64> = sent.iter().map(|m| d.send(0, m).unwrap()).collect();
    let e = d.kill(0).unwrap().wait_blocking(T).unwrap();
    let got: Vec<(u64, &[u8])> = e.undelivered.iter().map(|u| (u.envelope.correlation, u.envelope.payload())).collect();
    let want: Vec<(u64, &[u8])> = ids.iter().copied().zip(sent.iter().map(|m| &m[..])).collect();
    assert_eq!(got, want);
}

fn large_kernel_to_kernel_forwards_are_answered_by_the_receiver() {
    // slot 0 forwards the body of each message to slot 1 (echo), which answers the host: the body crosses
    // slot 1's kernel-to-kernel bulk area, then its outbox's; 100 forwards of 3 KiB lap an 8 KiB area often
    let d = open_with(DeviceConfig::default().slots(2).bulk_bytes(8 * 1024));
    d.create(0, "test", &[]).unwrap().wait_blocking(T).unwrap();
    d.create(1, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    for i in 0..100u32 {
        let body = pattern(3000 + i as usize, i);
        let reply = d.call(0, &op_msg(4, 1, &body), T).unwrap();
        assert_eq!((reply.slot, reply.payload().unwrap()), (1, &body[..]), "forward {i}");
    }
    let (s0, s1) = (d.snapshot(0).unwrap(), d.snapshot(1).unwrap());
    assert_eq!((s0.k2k.0, s1.k2k.1, s1.k2k.2), (100, 100, 0));
}

fn payloads_over_the_devices_limit_are_refused_before_anything_is_written() {
    let d = open_with(DeviceConfig::default().slots(1).bulk_bytes(4096));
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let too_big = vec![0u8; 4097];
    assert_eq!(d.send(0, &too_big).unwrap_err(), DeviceError::PayloadTooLarge { len: 4097, max: 4096 });
    assert!(matches!(d.call(0, &too_big, T), Err(DeviceError::PayloadTooLarge { .. })));
    assert!(matches!(d.send_batch(0, &[vec![1u8; 10], too_big]), Err(DeviceError::PayloadTooLarge { .. })));
    assert_eq!(d.stats().messages_sent, 0);
    // without bulk areas a device takes one envelope's worth
    let small = open(1);
    assert_eq!(small.max_payload(), PAYLOAD_BYTES);
    assert!(matches!(small.send(0, &[0u8; 97]), Err(DeviceError::PayloadTooLarge { len: 97, max: 96 })));
}

fn bulk_references_the_host_forges_are_bad_envelopes_never_reads_outside_the_area() {
    let d = open_with(DeviceConfig::default().slots(2).bulk_bytes(4096));
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    // (end, len): past the area, longer than the area, wrapping over its end, a zero-size area's worth
    let forged = [(5000u32, 4097u32), (4096 + 10, 20), (u32::MAX, u32::MAX), (3, 4), (100, 200)];
    for (i, (end, len)) in forged.iter().enumerate() {
        let mut reference = end.to_le_bytes().to_vec();
        reference.extend_from_slice(&len.to_le_bytes());
        let mut env = Envelope::to_actor(0, 100 + i as u64, &reference, true).unwrap();
        env.flags |= RV_FLAG_BULK as u8;
        d.send_envelope(0, env).unwrap();
    }
    // a bulk flag on a payload that is not a reference (wrong length)
    let mut env = Envelope::to_actor(0, 200, b"abc", true).unwrap().with_raw_header(RV_KIND_USER as u8, 3, 0);
    env.flags |= RV_FLAG_BULK as u8;
    d.send_envelope(0, env).unwrap();
    for _ in 0..forged.len() + 1 {
        let r = d.replies().recv_timeout(T).expect("every forged message is answered");
        let e = r.payload().unwrap_err();
        assert!(matches!(e, DeviceError::ErrorReply { code: DeviceCode::BadEnvelope, .. }), "{e:?}");
    }
    let snap = d.snapshot(0).unwrap();
    assert_eq!((snap.state, snap.bad_envelopes), (SlotState::Active, forged.len() as u32 + 1));
    let fine = pattern(2000, 5);
    assert_eq!(d.call(0, &fine, T).unwrap().payload().unwrap(), &fine[..]);
}

fn an_actors_state_is_read_between_messages_whole_and_in_order() {
    // counter state: [total: i64, count: u64] at the start of a 1 KiB region (a large reply)
    let d = open_with(DeviceConfig::default().slots(2).bulk_bytes(4096));
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    d.inject(0, SlotFault::Stall).unwrap();
    for v in [5i64, 7, 30] {
        d.send(0, &v.to_le_bytes()).unwrap();
    }
    d.inject(0, SlotFault::ClearStall).unwrap();
    // sent after the three adds: sees all of them, and is not counted as a message processed
    let state = d.read_state(0, T).unwrap();
    assert_eq!(state.len(), 1024);
    assert_eq!(i64::from_le_bytes(state[..8].try_into().unwrap()), 42);
    assert_eq!(u64::from_le_bytes(state[8..16].try_into().unwrap()), 3);
    assert!(state[16..].iter().all(|b| *b == 0));
    assert_eq!(d.snapshot(0).unwrap().messages_processed, 3);
    // a state larger than the device's largest message is refused before anything is sent, naming the
    // settings; its first bytes can still be read
    let small = open_with(DeviceConfig::default().slots(1));
    small.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    small.call(0, &11i64.to_le_bytes(), T).unwrap();
    let err = small.read_state(0, T).unwrap_err();
    assert_eq!(err, DeviceError::StateTooLargeToRead { len: 1024, max: 96 });
    assert!(err.to_string().contains("DeviceConfig::bulk_bytes"), "{err}");
    let head = small.read_state_prefix(0, 16, T).unwrap();
    assert_eq!(head.len(), 16);
    assert_eq!(i64::from_le_bytes(head[..8].try_into().unwrap()), 11);
    assert_eq!(u64::from_le_bytes(head[8..].try_into().unwrap()), 1);
    let past = small.read_state_prefix(0, 1025, T).unwrap_err();
    assert_eq!(past, DeviceError::PayloadTooLarge { len: 1025, max: 1024 });
    // a 64-byte state fits one envelope
    let tiny = open_with(DeviceConfig::default().slots(1).state_bytes(64));
    tiny.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    tiny.call(0, &9i64.to_le_bytes(), T).unwrap();
    assert_eq!(i64::from_le_bytes(tiny.read_state(0, T).unwrap()[..8].try_into().unwrap()), 9);
}

on_every_backend!(
    an_actors_state_is_read_between_messages_whole_and_in_order,
    large_calls_round_trip_whole_through_the_bulk_areas,
    one_way_large_sends_wait_for_bulk_room_and_all_arrive,
    queued_and_poison_large_messages_are_handed_back_whole,
    killed_with_large_messages_queued_hands_them_back_whole,
    large_kernel_to_kernel_forwards_are_answered_by_the_receiver,
    payloads_over_the_devices_limit_are_refused_before_anything_is_written,
    bulk_references_the_host_forges_are_bad_envelopes_never_reads_outside_the_area,
);
