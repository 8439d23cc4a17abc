//! The device API from async code, and typed payloads (zero-copy `#[repr(C)]` and rkyv).

mod common;
use common::*;
use ringvisor_device::*;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
struct CounterReply {
    total: i64,
    count: u64,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, PartialEq)]
struct Reading {
    sensor: String,
    values: Vec<f32>,
}

fn pod_payloads_go_zero_copy_both_ways() {
    let d = open(1);
    d.create(0, "counter", pod_bytes(&40i64)).unwrap().wait_blocking(T).unwrap();
    let r: CounterReply = d.call(0, pod_bytes(&2i64), T).unwrap().decode().unwrap();
    assert_eq!(r, CounterReply { total: 42, count: 1 });
    // a reply of another size is a codec error, not garbage
    let err = d.call(0, pod_bytes(&1i64), T).unwrap().decode::<u64>().unwrap_err();
    assert!(matches!(err, DeviceError::Codec(_)), "{err:?}");
}

fn rkyv_payloads_round_trip_through_an_actor_and_are_validated() {
    let d = open(1);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let value = Reading { sensor: "fleet/7".into(), values: vec![1.5, -2.0, 3.25] };
    let bytes = encode_archived(&value).unwrap();
    let echoed = d.call(0, &bytes, T).unwrap();
    let back: Reading = decode_archived(echoed.payload().unwrap()).unwrap();
    assert_eq!(back, value);
    // too large for one envelope: refused before anything is written
    let big = Reading { sensor: "x".repeat(200), values: vec![] };
    assert!(matches!(encode_archived(&big), Err(DeviceError::PayloadTooLarge { .. })));
    // bytes that are not a valid archive are rejected by validation
    assert!(matches!(decode_archived::<Reading>(&[0xFF; 40]), Err(DeviceError::Codec(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_commands_calls_and_streams() {
    let d = open(2);
    let events = d.subscribe_slot(1).unwrap();
    let created = d.create(1, "counter", &[]).unwrap().wait(T).await.unwrap();
    assert_eq!(created.event.kind, EventKind::Created);
    assert_eq!(events.recv().await.unwrap().event.kind, EventKind::Created);
    let calls = (1..=10i64).map(|i| {
        let d = d.clone();
        async move { d.call_async(1, &i.to_le_bytes(), T).await.unwrap() }
    });
    let replies = futures_join_all(calls).await;
    let max = replies.iter().map(i64_of).max().unwrap();
    assert_eq!(max, 55);
    d.post(1, &1i64.to_le_bytes(), T).unwrap();
    assert_eq!(i64_of(&d.replies().recv().await.unwrap()), 56);
}

async fn futures_join_all<F>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

fn send_batch_writes_what_fits_in_order_and_checks_payloads_first() {
    let d = common::open_with(DeviceConfig::default().slots(2).inbox_capacity(8));
    d.create(0, "counter", &[]).unwrap().wait_blocking(common::T).unwrap();
    d.inject(0, SlotFault::Stall).unwrap();
    let deltas: Vec<[u8; 8]> = (1..=12i64).map(|v| v.to_le_bytes()).collect();
    assert_eq!(d.send_batch(0, &deltas).unwrap(), 8, "only what fits");
    assert!(matches!(d.send_batch(0, &deltas[8..]), Err(DeviceError::InboxFull { slot: 0 })));
    let too_big = [vec![0u8; 8], vec![0u8; 200]];
    assert!(matches!(d.send_batch(1, &too_big), Err(DeviceError::PayloadTooLarge { .. })));
    assert_eq!(d.send_batch::<&[u8]>(0, &[]).unwrap(), 0);
    d.inject(0, SlotFault::ClearStall).unwrap();
    let total: [i64; 2] = d.call(0, &0i64.to_le_bytes(), common::T).unwrap().decode().unwrap();
    assert_eq!(total, [36, 9], "1 + ... + 8 processed in order, then the call");
}

/// The latency mode changes how the host threads wait, not what the device does: calls, sends, a restart and
/// a shutdown behave as without it (and the shutdown ends the threads that never park).
fn the_latency_mode_answers_restarts_and_shuts_down_as_without_it() {
    let d = open_with(DeviceConfig::default().slots(4).latency_mode(true));
    d.create(1, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    for i in 1..=100i64 {
        assert_eq!(i64_of(&d.call(1, &1i64.to_le_bytes(), T).unwrap()), i);
    }
    d.send(1, &5i64.to_le_bytes()).unwrap();
    assert_eq!(i64_of(&d.call(1, &0i64.to_le_bytes(), T).unwrap()), 105);
    let e = d.restart(1, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    assert_eq!((e.event.kind, e.event.generation), (EventKind::Restarted, 2));
    assert_eq!(i64_of(&d.call(1, &2i64.to_le_bytes(), T).unwrap()), 2);
    d.shutdown();
    assert!(matches!(d.call(1, &1i64.to_le_bytes(), T), Err(DeviceError::Closed)));
}

/// Callers of one slot read its outbox themselves while they wait, each taking its own reply from it: with
/// several threads calling one echo actor at once (and, in the latency mode, the caller's read racing the
/// device's threads) each call gets its own payload back, and replies of posts to the same slot, read from the
/// same outbox by those callers, all reach `replies()`, none taken for a call's.
fn callers_of_one_slot_each_get_their_own_reply_and_posts_go_to_replies() {
    for latency_mode in [false, true] {
        let d = open_with(DeviceConfig::default().slots(2).latency_mode(latency_mode));
        d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
        const CALLERS: u32 = 3;
        const CALLS: u32 = 300;
        const POSTS: u32 = 200;
        let posted: Vec<u64> = std::thread::scope(|s| {
            for caller in 0..CALLERS {
                let d = &d;
                s.spawn(move || {
                    for i in 0..CALLS {
                        let payload = [caller.to_le_bytes(), i.to_le_bytes()].concat();
                        let reply = d.call(0, &payload, T).unwrap();
                        assert_eq!(reply.payload().unwrap(), &payload[..], "caller {caller}, call {i}");
                    }
                });
            }
            let poster =
                s.spawn(|| (0..POSTS).map(|i| d.post(0, &(1_000_000 + i).to_le_bytes(), T).unwrap()).collect());
            poster.join().unwrap()
        });
        let mut answered: Vec<u64> = (0..POSTS)
            .map(|_| d.replies().recv_timeout(T).expect("every post's reply reaches replies()").correlation)
            .collect();
        answered.sort_unstable();
        let mut expected = posted.clone();
        expected.sort_unstable();
        assert_eq!(answered, expected, "latency mode {latency_mode}");
        assert!(d.replies().try_recv().is_none(), "no call's reply strayed to replies() (latency mode {latency_mode})");
        d.shutdown();
    }
}

/// A traced call answers as a plain one and says where its time went: host stamps in order, and (where the device
/// code records them: not on WebGPU) the device's four in order, the hops adding up to the whole call. Calls beside
/// it are not traced, and a refused payload is refused as by `call`.
fn a_traced_call_is_answered_and_measured_hop_by_hop() {
    let d = open(2);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    d.create(1, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let mut previous = None;
    for round in 0..5u8 {
        let (reply, trace) = d.trace_call(0, &[round; 8], T).unwrap();
        assert_eq!(reply.payload().unwrap(), &[round; 8]);
        assert_eq!(d.call(1, b"untraced", T).unwrap().payload().unwrap(), b"untraced");
        assert!(trace.started_ns <= trace.written_ns && trace.written_ns <= trace.answered_ns, "{trace:?}");
        let hops = trace.hops();
        match trace.device {
            None => {
                assert!(on_wgpu(), "only WebGPU records no device stamps: {trace:?}");
                assert_eq!(hops.len(), 2);
            }
            Some(s) => {
                assert!(!on_wgpu(), "{trace:?}");
                let ordered = s.step_began_ns <= s.read_ns && s.read_ns <= s.ran_ns && s.ran_ns <= s.published_ns;
                assert!(ordered, "the device's stamps in order: {s:?}");
                assert_eq!(hops.len(), 6);
                assert_ne!(previous, Some(s), "each traced call has stamps of its own");
                previous = Some(s);
            }
        }
        assert_eq!(hops.iter().map(|(_, ns)| ns).sum::<i64>(), trace.total_ns() as i64, "{hops:?}");
    }
    let too_large = vec![0u8; d.max_payload() + 1];
    assert!(matches!(d.trace_call(0, &too_large, T), Err(DeviceError::PayloadTooLarge { .. })));
}

/// A task that calls in a loop gives the runtime back to its other tasks, even when every call is answered at
/// once (each counts against the task's cooperative budget): on a one-thread runtime, a task spawned before the
/// loop runs before the loop ends.
fn a_task_calling_in_a_loop_lets_the_runtimes_other_tasks_run() {
    let d = open(1);
    d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let other_ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other_ran.clone();
        let other = tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::Relaxed) });
        let mut calls_before_it_ran = None;
        for i in 0..2_000u32 {
            d.call_async(0, &i.to_le_bytes(), T).await.unwrap();
            if calls_before_it_ran.is_none() && other_ran.load(std::sync::atomic::Ordering::Relaxed) {
                calls_before_it_ran = Some(i);
            }
        }
        other.await.unwrap();
        let ran_after = calls_before_it_ran.expect("the other task ran while the calls went on");
        assert!(ran_after <= 256, "the other task ran only after {ran_after} calls");
    });
}

/// A timeout too long to add to now (`Duration::MAX`: wait for ever) is a deadline that never comes, not a panic
/// (`Instant + Duration` panics on overflow): every wait that takes a timeout answers as with a finite one.
fn a_timeout_of_duration_max_waits_for_ever_without_panicking() {
    let forever = std::time::Duration::MAX;
    let d = open(1);
    d.create(0, "echo", &[]).unwrap().wait_blocking(forever).unwrap();
    assert_eq!(d.call(0, &[1, 2, 3], forever).unwrap().payload().unwrap(), &[1, 2, 3]);
    d.send_timeout(0, &[4], forever).unwrap();
    let posted = d.post(0, &[5], forever).unwrap();
    assert_eq!(d.replies().recv_timeout(forever).unwrap().correlation, posted);
    assert_eq!(d.read_state_prefix(0, 8, forever).unwrap().len(), 8);
    let sender = d.sender_with(0, 4, forever, forever).unwrap();
    sender.send(&[6]).unwrap();
    assert_eq!(sender.call(&[7], forever).unwrap().payload().unwrap(), &[7]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        assert_eq!(d.call_async(0, &[8], forever).await.unwrap().payload().unwrap(), &[8]);
        d.restart(0, "echo", &[]).unwrap().wait(forever).await.unwrap();
    });
    d.drain_and_wait(0, forever).unwrap();
}

on_every_backend!(
    a_timeout_of_duration_max_waits_for_ever_without_panicking,
    a_task_calling_in_a_loop_lets_the_runtimes_other_tasks_run,
    callers_of_one_slot_each_get_their_own_reply_and_posts_go_to_replies,
    a_traced_call_is_answered_and_measured_hop_by_hop,
    the_latency_mode_answers_restarts_and_shuts_down_as_without_it,
    pod_payloads_go_zero_copy_both_ways,
    rkyv_payloads_round_trip_through_an_actor_and_are_validated,
    send_batch_writes_what_fits_in_order_and_checks_payloads_first,
);
