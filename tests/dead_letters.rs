//! The dead-letter queue, one test per reason, redelivery, and the accounting rule: every message handed
//! to a handle is processed or becomes a dead letter.

mod support;

use std::time::{Duration, Instant};

use ringvisor::prelude::*;
use ringvisor::supervisor::*;
use support::{small_runtime, test_msg};

const T: Duration = Duration::from_secs(10);
const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

fn stall(ns: u64) -> Vec<u8> {
    test_msg(3, 0, ns)
}

fn test_child(id: &str) -> ChildSpec {
    ChildSpec::gpu(id, GpuChild::new("test").init(POISON.to_le_bytes())).name(format!("dl/{id}"))
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn only(rt: &Runtime, reason: DeadLetterReason) -> Vec<DeadLetter> {
    let all = rt.dead_letters().snapshot();
    assert!(all.iter().all(|l| l.reason == reason), "{all:?}");
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_target() {
    let rt = small_runtime(vec![]).await;
    assert!(matches!(rt.services().send("dl/nobody", b"hello"), Err(SendError::UnknownTarget(_))));
    let letters = only(&rt, DeadLetterReason::UnknownTarget);
    assert_eq!(letters.len(), 1);
    assert_eq!((letters[0].target.as_deref(), letters[0].payload.as_slice()), (Some("dl/nobody"), &b"hello"[..]));
    assert_eq!(letters[0].origin, Origin::Host);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_target() {
    let rt = small_runtime(vec![test_child("a")]).await;
    let a = rt.gpu("dl/a").unwrap();
    rt.root().terminate_child("a").await.unwrap();
    assert_eq!(a.status(), ChildStatus::Stopped);
    assert!(matches!(a.send(b"late"), Err(SendError::Gone { status: ChildStatus::Stopped, .. })));
    let letters = only(&rt, DeadLetterReason::DeadTarget);
    assert_eq!((letters.len(), letters[0].slot), (1, Some(a.slot())));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_full_past_the_deadline() {
    let rt = small_runtime(vec![test_child("a")]).await;
    let a = rt.gpu("dl/a").unwrap();
    a.call(&stall(300_000_000), T).await.unwrap(); // answered when the stall begins
    let mut sent = 1;
    while a.send(&test_msg(1, sent, 0)).is_ok() {
        sent += 1;
        assert!(sent < 100, "inbox never filled");
    }
    let before = Instant::now();
    let r = a.try_send(&test_msg(1, 999, 0), Duration::from_millis(50));
    assert!(matches!(r, Err(SendError::InboxFull)), "{r:?}");
    assert!(before.elapsed() >= Duration::from_millis(50), "try_send waits for its deadline");
    let letters = only(&rt, DeadLetterReason::InboxFull);
    assert_eq!(letters.len(), 2, "the refused send and the refused try_send");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn left_in_inbox_at_restart_and_poison_at_crash_then_redelivered() {
    let rt = small_runtime(vec![test_child("a"), test_child("b")]).await;
    let (a, b) = (rt.gpu("dl/a").unwrap(), rt.gpu("dl/b").unwrap());
    // a stalls; then a poison message and three more queue behind it. When the stall ends the poison
    // message crashes a: it is quarantined, and the three are left in the inbox at the restart.
    a.send(&stall(100_000_000)).unwrap();
    a.send(&POISON.to_le_bytes()).unwrap();
    for i in 0..3 {
        a.send(&test_msg(1, i, 0)).unwrap();
    }
    eventually("four dead letters", || rt.dead_letters().stats().total() == 4).await;
    let stats = rt.dead_letters().stats();
    assert_eq!((stats.count(DeadLetterReason::Poison), stats.count(DeadLetterReason::LeftInInbox)), (1, 3), "{stats}");
    let letters = rt.dead_letters().snapshot();
    assert_eq!(letters[0].payload, POISON.to_le_bytes().to_vec(), "the poison letter first");
    assert!(letters.iter().all(|l| l.target.as_deref() == Some("dl/a")));
    assert!(a.child().wait_running(T).await);
    assert_eq!(a.call(&test_msg(1, 5, 0), T).await.unwrap().generation, 2, "the restart did not crash again");
    // Redeliver one left-in-inbox letter to b (elsewhere) and one to a (its own target).
    let before = rt.device().snapshot(b.slot()).unwrap().messages_processed;
    rt.services().redeliver(letters[1].seq, Some("dl/b")).unwrap();
    rt.services().redeliver(letters[2].seq, None).unwrap();
    eventually("redelivered to b", || rt.device().snapshot(b.slot()).unwrap().messages_processed == before + 1).await;
    let stats = rt.dead_letters().stats();
    assert_eq!((stats.redelivered, stats.held), (2, 2), "{stats}");
    assert!(rt.services().redeliver(letters[1].seq, None).is_err(), "a letter is redelivered once");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_account_for_everything_not_processed() {
    let rt = small_runtime(vec![test_child("a")]).await;
    let a = rt.gpu("dl/a").unwrap();
    let mut handed = 0u64;
    let mut refused = 0u64;
    for round in 0..20u32 {
        for i in 0..5 {
            handed += 1;
            refused += u64::from(a.try_send(&test_msg(1, i, 0), Duration::from_millis(20)).is_err());
        }
        handed += 1;
        refused += u64::from(a.send(&test_msg(2, round + 1, 0)).is_err()); // a failure: restart
        if round % 5 == 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(a.child().wait_running(T).await);
    // One call answered by the last incarnation: everything sent before it has been consumed or handed back.
    a.call(&test_msg(1, 0, 0), T).await.unwrap();
    let device = rt.device().stats();
    let dl = rt.dead_letters().stats();
    assert_eq!(device.messages_sent + refused, handed + 1, "every send reached the device or was refused");
    assert_eq!(dl.count(DeadLetterReason::InboxFull), refused, "every refused send is a dead letter ({dl})");
    assert_eq!(dl.count(DeadLetterReason::LeftInInbox), device.undelivered_left_in_inbox, "{dl}");
    assert_eq!(dl.count(DeadLetterReason::Poison), device.undelivered_in_flight, "{dl}");
    assert!(dl.count(DeadLetterReason::Poison) >= 1, "crashes happened ({dl})");
    rt.shutdown().await;
}
