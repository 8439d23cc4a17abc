//! The coalescing sender (`Device::sender`): single sends published in batches, in order; what is buffered is
//! published when the batch fills, on a flush, before a call, by the poller once due, and on drop; a full inbox
//! keeps messages buffered (never lost) and refuses new ones once the buffer is full; bad input is refused before
//! anything is buffered. On every backend.

mod common;
use common::*;
use ringvisor_device::*;
use std::time::Duration;

/// The counter's (total, count) after one more call adding 0.
fn total(d: &Device, slot: u32) -> (i64, u64) {
    let reply = d.call(slot, &0i64.to_le_bytes(), T).unwrap();
    let p = reply.payload().unwrap();
    (i64::from_le_bytes(p[..8].try_into().unwrap()), u64::from_le_bytes(p[8..16].try_into().unwrap()))
}

fn sends_arrive_in_batches_and_before_a_call() {
    let d = open(2);
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    let sender = d.sender_with(0, 8, Duration::from_secs(60), T).unwrap();
    for i in 1..=20i64 {
        sender.send(&i.to_le_bytes()).unwrap();
    }
    // two full batches of 8 are in the inbox; 4 wait for the next batch (the delay is a minute)
    assert_eq!(sender.buffered(), 4);
    // a call through the sender comes after every message sent before it
    let reply = sender.call(&0i64.to_le_bytes(), T).unwrap();
    assert_eq!(i64_of(&reply), (1..=20).sum::<i64>());
    assert_eq!(sender.buffered(), 0);
    sender.send(&100i64.to_le_bytes()).unwrap();
    sender.flush().unwrap();
    assert_eq!(total(&d, 0), (310, 23));
    // dropped with messages buffered: they are published
    sender.send(&1000i64.to_le_bytes()).unwrap();
    drop(sender);
    assert_eq!(total(&d, 0), (1310, 25));
}

fn an_idle_senders_messages_are_published_once_due() {
    let d = open(1);
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    let sender = d.sender_with(0, 64, Duration::from_millis(1), T).unwrap();
    for _ in 0..3 {
        sender.send(&5i64.to_le_bytes()).unwrap();
    }
    // nobody flushes: the poller publishes them once the oldest has waited its delay
    eventually("the poller publishes the due messages", || sender.buffered() == 0);
    assert_eq!(total(&d, 0), (15, 4));
}

fn a_full_inbox_keeps_messages_buffered_and_refuses_new_ones_once_full() {
    let d = open_with(DeviceConfig::default().slots(1).inbox_capacity(4));
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    d.inject(0, SlotFault::Stall).unwrap();
    let sender = d.sender_with(0, 8, Duration::from_secs(60), Duration::from_millis(20)).unwrap();
    // 8 messages: the batch fills, 4 fit in the inbox, 4 stay buffered (the flush ran out of time)
    for _ in 0..8 {
        sender.send(&1i64.to_le_bytes()).unwrap();
    }
    assert_eq!(sender.buffered(), 4);
    assert!(matches!(sender.flush(), Err(DeviceError::InboxFull { slot: 0 })));
    for _ in 0..4 {
        sender.send(&1i64.to_le_bytes()).unwrap();
    }
    // the buffer is full of messages the inbox does not take: the next one is refused, the others kept
    assert!(matches!(sender.send(&1i64.to_le_bytes()), Err(DeviceError::InboxFull { slot: 0 })));
    assert_eq!(sender.buffered(), 8);
    d.inject(0, SlotFault::ClearStall).unwrap();
    sender.flush().unwrap();
    assert_eq!(sender.buffered(), 0);
    assert_eq!(total(&d, 0), (12, 13), "every message taken reached the actor once");
}

fn bad_input_is_refused_before_anything_is_buffered() {
    let d = open(2);
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    assert!(matches!(d.sender(9), Err(DeviceError::SlotOutOfRange { slot: 9, .. })));
    assert!(matches!(d.sender_with(0, 0, Duration::ZERO, T), Err(DeviceError::InvalidConfig(_))));
    let sender = d.sender(0).unwrap();
    let too_large = vec![0u8; d.max_payload() + 1];
    assert!(matches!(sender.send(&too_large), Err(DeviceError::PayloadTooLarge { .. })));
    assert_eq!(sender.buffered(), 0);
    // a slot with no actor: the flush says so, and the message stays buffered
    let idle = d.sender(1).unwrap();
    idle.send(&1i64.to_le_bytes()).unwrap();
    assert!(idle.flush().is_err());
    assert_eq!(idle.buffered(), 1);
    d.shutdown();
    assert!(matches!(d.sender(0), Err(DeviceError::Closed)));
}

fn a_producer_and_the_poller_publishing_one_buffer_lose_and_repeat_nothing() {
    // no delay: the poller publishes the buffer in every round it finds it non-empty, while the producer fills
    // it (in the latency mode it never parks, so it looks all the time); the buffer's lock is all that keeps
    // the two from publishing a message twice or dropping one
    let d = open_with(DeviceConfig::default().slots(1).latency_mode(true));
    d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    let sender = d.sender_with(0, 16, Duration::ZERO, T).unwrap();
    const N: i64 = 50_000;
    for i in 1..=N {
        sender.send(&i.to_le_bytes()).unwrap();
    }
    sender.flush().unwrap();
    assert_eq!(total(&d, 0), (N * (N + 1) / 2, N as u64 + 1), "each message reached the actor once");
}

on_every_backend!(
    sends_arrive_in_batches_and_before_a_call,
    an_idle_senders_messages_are_published_once_due,
    a_full_inbox_keeps_messages_buffered_and_refuses_new_ones_once_full,
    bad_input_is_refused_before_anything_is_buffered,
    a_producer_and_the_poller_publishing_one_buffer_lose_and_repeat_nothing,
);
