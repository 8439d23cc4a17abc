//! Supervision of GPU actors beyond the OTP traces: start errors with the device's reason, stable handles
//! across restarts, messages held while a child restarts, draining stops, orphaned slots, backoff, dynamic
//! children, registry rebinding.

use std::time::{Duration, Instant};

use ringvisor::device::{DeviceConfig, SlotState};
use ringvisor::prelude::*;
use ringvisor::supervisor::*;
use ringvisor::TOP_SUPERVISOR;

const T: Duration = Duration::from_secs(10);
const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

fn config() -> DeviceConfig {
    DeviceConfig::default().slots(16).inbox_capacity(16).outbox_capacity(16).state_bytes(64)
}

fn test_msg(op: u32, arg: u32, wide: u64) -> Vec<u8> {
    let mut v = op.to_le_bytes().to_vec();
    v.extend_from_slice(&arg.to_le_bytes());
    v.extend_from_slice(&wide.to_le_bytes());
    v
}

fn fail_msg() -> Vec<u8> {
    test_msg(2, 0, 0)
}

fn counter(id: &str) -> ChildSpec {
    ChildSpec::gpu(id, GpuChild::new("counter")).name(format!("app/{id}"))
}

async fn total(actor: &GpuActorRef, delta: i64) -> i64 {
    let r: [i64; 2] = actor.call(&delta.to_le_bytes(), T).await.unwrap().decode().unwrap();
    r[0]
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_init_failure_is_a_start_error_with_the_device_reason() {
    let mut init = POISON.to_le_bytes().to_vec();
    init.extend_from_slice(&1234u32.to_le_bytes());
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(ChildSpec::gpu("bad", GpuChild::new("test").init(init)));
    let err = Runtime::start(config(), spec).await.err().expect("start fails");
    let text = err.to_string();
    assert!(text.starts_with("supervisor: child `bad` failed to start") && text.contains("1234"), "{text}");
    assert!(!text.contains(TOP_SUPERVISOR) && !text.contains("`root`"), "names the user's child only: {text}");
    assert!(!text.contains("panicked"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_behaviours_and_exhausted_slots_are_clear_start_errors() {
    let rt = Runtime::start(DeviceConfig::default().slots(2), SupervisorSpec::new(Strategy::OneForOne)).await.unwrap();
    let err = rt.root().start_child(ChildSpec::gpu("x", GpuChild::new("no-such"))).await.unwrap_err();
    assert!(err.to_string().contains("unknown behaviour `no-such`"), "{err}");
    rt.root().start_child(counter("a")).await.unwrap();
    rt.root().start_child(counter("b")).await.unwrap();
    let err = rt.root().start_child(counter("c")).await.unwrap_err();
    assert!(matches!(err, SupervisorError::NoSlot(_)), "{err}");
    rt.root().terminate_child("a").await.unwrap();
    rt.root().delete_child("a").await.unwrap();
    rt.root().start_child(counter("c")).await.expect("a deleted child's slot is free again");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_with_more_gpu_children_than_slots_is_refused_before_anything_starts() {
    let spec = (0..3).fold(SupervisorSpec::new(Strategy::OneForOne), |s, i| s.child(counter(&format!("c{i}"))));
    let Err(err) = Runtime::start(DeviceConfig::default().slots(2), spec).await else {
        panic!("3 GPU children started on 2 slots")
    };
    let text = err.to_string();
    assert!(text.contains("the tree starts 3 GPU children; a device of 2 slots holds 2"), "{text}");
    assert!(text.contains("DeviceConfig::slots"), "names the setting: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_stays_valid_across_restarts_and_the_registry_rebinds() {
    let spec = SupervisorSpec::new(Strategy::OneForOne).intensity(5, Duration::from_secs(5)).child(counter("c"));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let mut watch = rt.registry().watch();
    let handle = rt.gpu("app/c").unwrap();
    let before = rt.registry().lookup("app/c").unwrap();
    assert_eq!(total(&handle, 5).await, 5);
    for round in 1..=3u32 {
        rt.device().inject(handle.slot(), SlotFault::CrashNextMessage).unwrap();
        handle.send(&1i64.to_le_bytes()).unwrap();
        eventually("restart", || rt.device().host_view(handle.slot()).unwrap().0 == 1 + round).await;
        assert!(handle.child().wait_running(T).await);
        assert_eq!(total(&handle, 2).await, 2, "a restarted actor starts from fresh state");
    }
    assert!(rt.registry().lookup("app/c").unwrap().same_child(&before));
    // One Rebound per restart. The supervisor announces it just after the handle turns Running, so the last
    // one may still be on its way: wait for three, then check that no other event came.
    for restart in 1..=3 {
        let event = tokio::time::timeout(T, watch.recv()).await.expect("a rebind per restart");
        assert_eq!(event, Some(RegistryEvent::Rebound("app/c".into())), "restart {restart}");
    }
    assert!(watch.try_recv().is_err(), "nothing but the three rebinds");
    rt.shutdown().await;
}

/// `Duration::MAX` (wait for ever) as a call's timeout and as a child's start timeout is a deadline that never
/// comes, not a panic: the child starts, answers, and restarts after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_of_duration_max_is_wait_for_ever_for_calls_and_starts() {
    let forever = Duration::MAX;
    let gpu = GpuChild::new("test").init(POISON.to_le_bytes()).start_timeout(forever);
    let child = ChildSpec::gpu("t", gpu).name("app/t");
    let rt = Runtime::start(config(), SupervisorSpec::new(Strategy::OneForOne).child(child)).await.unwrap();
    let t = rt.gpu("app/t").unwrap();
    assert_eq!(t.call(&test_msg(1, 5, 0), forever).await.unwrap().generation, 1);
    t.send(&fail_msg()).unwrap();
    // (a call written before the crash would be handed back undelivered, as OTP's call to a process that dies)
    eventually("the restart", || rt.device().snapshot(t.slot()).unwrap().generation == 2).await;
    let reply = t.call(&test_msg(1, 6, 0), forever).await.unwrap();
    assert_eq!(reply.generation, 2, "answered by the restarted incarnation");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_a_child_restarts_wait_for_the_new_incarnation() {
    // A backoff keeps the child down long enough to send to it while it restarts.
    let backoff = Backoff::exponential(Duration::from_millis(300), Duration::from_millis(300)).jitter(0.0);
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("t", GpuChild::new("test").init(POISON.to_le_bytes())).name("app/t").backoff(backoff));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let t = rt.gpu("app/t").unwrap();
    t.send(&fail_msg()).unwrap();
    eventually("restarting", || t.status() == ChildStatus::Restarting).await;
    for i in 0..3u32 {
        t.send(&test_msg(1, i, 0)).unwrap();
    }
    let reply = t.call(&test_msg(1, 77, 0), T).await.unwrap();
    assert_eq!(reply.generation, 2, "answered by the new incarnation");
    eventually("the three messages processed", || rt.device().snapshot(t.slot()).unwrap().messages_processed >= 4)
        .await;
    let stats = rt.dead_letters().stats();
    assert_eq!((stats.total(), stats.count(DeadLetterReason::Poison)), (1, 1), "{stats}");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_temporary_child_s_handle_errors_and_dead_letters() {
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(counter("tmp").restart(Restart::Temporary));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let h = rt.gpu("app/tmp").unwrap();
    rt.root().terminate_child("tmp").await.unwrap();
    assert_eq!(h.status(), ChildStatus::Gone);
    let err = h.send(&1i64.to_le_bytes()).unwrap_err();
    assert!(matches!(err, SendError::Gone { status: ChildStatus::Gone, .. }), "{err:?}");
    assert!(err.to_string().starts_with("`app/tmp` is gone:"), "names the actor: {err}");
    assert!(matches!(h.call(&1i64.to_le_bytes(), T).await, Err(SendError::Gone { .. })));
    assert!(rt.registry().lookup("app/tmp").is_none(), "a gone child's name is released");
    let letters = rt.dead_letters().snapshot();
    assert_eq!(letters.len(), 2);
    assert!(letters.iter().all(|l| l.reason == DeadLetterReason::DeadTarget && l.target.as_deref() == Some("app/tmp")));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_drains_and_a_brutal_kill_kills_the_device_actor() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("g", GpuChild::new("test").init(POISON.to_le_bytes())).name("app/g"))
        .child(
            ChildSpec::gpu("b", GpuChild::new("test").init(POISON.to_le_bytes()))
                .name("app/b")
                .shutdown(Shutdown::BrutalKill),
        );
    let rt = Runtime::start(config(), spec).await.unwrap();
    let (g, b) = (rt.gpu("app/g").unwrap(), rt.gpu("app/b").unwrap());
    // g: stalled with messages queued; a graceful stop waits for them to be processed.
    g.send(&test_msg(3, 0, 50_000_000)).unwrap();
    for i in 0..4 {
        g.send(&test_msg(1, i, 0)).unwrap();
    }
    rt.root().terminate_child("g").await.unwrap();
    let snap = rt.device().snapshot(g.slot()).unwrap();
    assert_eq!((snap.state, snap.messages_processed), (SlotState::Terminated, 5), "drained before stopping");
    // b: stalled with messages queued; brutal kill does not wait, and the device actor is killed.
    b.send(&test_msg(3, 0, 5_000_000_000)).unwrap();
    for i in 0..4 {
        b.send(&test_msg(1, i, 0)).unwrap();
    }
    let started = Instant::now();
    rt.root().terminate_child("b").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(4), "brutal kill waits for nothing");
    eventually("device actor killed", || rt.device().host_view(b.slot()).unwrap().1 == SlotState::Terminated).await;
    eventually("leftovers dead-lettered", || rt.dead_letters().stats().count(DeadLetterReason::LeftInInbox) >= 3).await;
    rt.shutdown().await;
}

/// The next exit of `child` the tree reports.
async fn next_exit(events: &mut tokio::sync::mpsc::UnboundedReceiver<TreeEvent>, of: &str) -> ExitReason {
    loop {
        match tokio::time::timeout(T, events.recv()).await.expect("an exit in time").expect("events open") {
            TreeEvent::ChildExited { child, reason, .. } if child == of => return reason,
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_ends_a_gpu_child_with_that_reason_and_its_restart_type_decides() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(5, Duration::from_secs(5))
        .child(counter("p"))
        .child(counter("t").restart(Restart::Transient));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let (p, t) = (rt.gpu("app/p").unwrap(), rt.gpu("app/t").unwrap());
    let mirror = p.mirror().expect("a GPU child is mirrored by default");
    assert_eq!(p.child().actor().map(|a| a.get_id()), Some(mirror.get_id()), "its actor is its mirror");
    assert_eq!(total(&p, 7).await, 7);
    // A transient child that exits `shutdown` is not restarted; its device actor is killed.
    assert!(t.exit(ExitReason::Shutdown));
    assert_eq!(next_exit(&mut events, "t").await, ExitReason::Shutdown);
    eventually("t stopped", || t.status() == ChildStatus::Stopped).await;
    eventually("t's device actor killed", || rt.device().host_view(t.slot()).unwrap().1 == SlotState::Terminated).await;
    assert!(!t.exit(ExitReason::Killed), "nothing running to exit");
    // A permanent child that exits abnormally is restarted, from fresh state.
    let generation = rt.device().host_view(p.slot()).unwrap().0;
    assert!(p.exit(ExitReason::Abnormal("boom".into())));
    assert_eq!(next_exit(&mut events, "p").await, ExitReason::Abnormal("boom".into()));
    loop {
        match tokio::time::timeout(T, events.recv()).await.expect("a start in time").expect("events open") {
            TreeEvent::ChildStarted { child, .. } if child == "p" => break,
            _ => {}
        }
    }
    assert!(rt.device().host_view(p.slot()).unwrap().0 > generation, "a new incarnation");
    assert_eq!(total(&p, 2).await, 2, "fresh state");
    let which = rt.root().which_children().await.unwrap();
    let states: Vec<_> = which.iter().map(|c| (c.id.as_str(), c.state)).collect();
    assert_eq!(states, [("p", RunState::Running), ("t", RunState::Undefined)]);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_spaces_restarts_and_still_counts_toward_intensity() {
    let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1)).jitter(0.0);
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(2, Duration::from_secs(30))
        .child(ChildSpec::gpu("t", GpuChild::new("test").init(POISON.to_le_bytes())).name("app/t").backoff(backoff));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let t = rt.gpu("app/t").unwrap();
    let mut exited_at = None;
    let mut gaps = Vec::new();
    for _ in 0..2 {
        t.send(&fail_msg()).unwrap();
        loop {
            match tokio::time::timeout(T, events.recv()).await.unwrap().unwrap() {
                TreeEvent::ChildExited { .. } => exited_at = Some(Instant::now()),
                TreeEvent::ChildStarted { .. } => {
                    gaps.push(exited_at.unwrap().elapsed());
                    break;
                }
                _ => {}
            }
        }
    }
    assert!(gaps[0] >= Duration::from_millis(90), "first restart after ~100 ms, was {:?}", gaps[0]);
    assert!(gaps[1] >= Duration::from_millis(190), "second after ~200 ms, was {:?}", gaps[1]);
    // The third restart within the period exceeds intensity 2: the supervisor shuts down.
    t.send(&fail_msg()).unwrap();
    tokio::time::timeout(T, rt.root().wait()).await.expect("supervisor ends");
    assert_eq!(t.status(), ChildStatus::Gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_one_for_one_children_are_started_named_and_found_by_pattern() {
    let template = ChildSpec::gpu("sensor", GpuChild::new("counter")).name("fleet/sensors/{id}");
    let spec = SupervisorSpec::simple(template).intensity(10, Duration::from_secs(5));
    let rt = Runtime::start(config(), spec).await.unwrap();
    for i in 0..5i64 {
        let child = rt.root().start_dynamic(i.to_le_bytes().to_vec()).await.unwrap();
        assert_eq!(child.name(), Some(format!("fleet/sensors/sensor-{}", i + 1).as_str()));
    }
    let found = rt.find("fleet/sensors/*").unwrap();
    assert_eq!(found.len(), 5);
    for (i, (_, child)) in found.iter().enumerate() {
        assert_eq!(total(&child.gpu().unwrap(), 0).await, i as i64, "init bytes are the dynamic args");
    }
    assert!(matches!(rt.root().restart_child("sensor-1").await, Err(SupervisorError::WrongStrategy(_))));
    assert!(matches!(rt.root().start_child(counter("x")).await, Err(SupervisorError::WrongStrategy(_))));
    rt.root().terminate_child("sensor-2").await.unwrap();
    assert_eq!(rt.root().count_children().await.unwrap().specs, 4, "a terminated dynamic child is removed");
    assert_eq!(rt.find("fleet/sensors/*").unwrap().len(), 4);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_fails_a_hung_child_and_supervision_restarts_it() {
    use ringvisor::faults::InjectedFault;
    let watched = GpuChild::new("counter").heartbeat_timeout(Some(Duration::from_millis(100)));
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("h", watched).name("app/h"))
        .child(counter("idle").restart(Restart::Permanent));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let h = rt.gpu("app/h").unwrap();
    assert_eq!(total(&h, 4).await, 4);
    // A hang that ends by itself before the bound is not a failure.
    rt.faults().inject("app/h", InjectedFault::Hang(Some(Duration::from_millis(30)))).unwrap();
    assert_eq!(total(&h, 1).await, 5, "answered once the short hang ended");
    // A hang that does not end: the watchdog fails the child; it restarts with fresh state.
    rt.faults().inject("app/h", InjectedFault::Hang(None)).unwrap();
    let stuck = h.call(&1i64.to_le_bytes(), T).await;
    assert!(matches!(stuck, Err(SendError::Undelivered { .. })), "{stuck:?}");
    let exit = loop {
        match tokio::time::timeout(T, events.recv()).await.unwrap().unwrap() {
            TreeEvent::ChildExited { child, reason, .. } => break (child, reason),
            _ => continue,
        }
    };
    assert_eq!(exit.0, "h");
    assert!(matches!(&exit.1, ExitReason::Abnormal(why) if why.contains("hung")), "{:?}", exit.1);
    assert_eq!(total(&h, 2).await, 2, "restarted, fresh state");
    let idle = rt.gpu("app/idle").unwrap();
    assert_eq!(idle.child().status(), ChildStatus::Running, "an idle actor (no work pending) is never hung");
    assert_eq!(rt.dead_letters().stats().count(DeadLetterReason::LeftInInbox), 1);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_whose_event_is_lost_is_caught_by_the_watchdog_and_a_late_one_still_acts() {
    use ringvisor::faults::InjectedFault;
    let watched = |b: &str| GpuChild::new(b).heartbeat_timeout(Some(Duration::from_millis(100)));
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(5, Duration::from_secs(5))
        .child(ChildSpec::gpu("lost", watched("counter")).name("app/lost"))
        .child(ChildSpec::gpu("late", watched("counter")).name("app/late"));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let mut events = rt.services().events().subscribe();
    // lost: its Failed event never reaches its supervisor; the watchdog sees the incarnation ended unheard.
    rt.faults().inject("app/lost", InjectedFault::DropEvents(Duration::from_secs(30))).unwrap();
    rt.faults().inject("app/lost", InjectedFault::CrashNextMessage).unwrap();
    let lost = rt.gpu("app/lost").unwrap();
    lost.send(&1i64.to_le_bytes()).unwrap();
    let (child, reason) = loop {
        if let TreeEvent::ChildExited { child, reason, .. } =
            tokio::time::timeout(T, events.recv()).await.unwrap().unwrap()
        {
            break (child, reason);
        }
    };
    assert_eq!(child, "lost");
    assert!(matches!(&reason, ExitReason::Abnormal(why) if why.contains("no event told the host")), "{reason:?}");
    assert_eq!(total(&lost, 3).await, 3, "restarted");
    // late: its events arrive 150 ms late; the restart happens, no sooner.
    rt.faults().inject("app/late", InjectedFault::DelayEvents(Duration::from_millis(150))).unwrap();
    rt.faults().inject("app/late", InjectedFault::CrashNextMessage).unwrap();
    let late = rt.gpu("app/late").unwrap();
    let crashed_at = Instant::now();
    late.send(&1i64.to_le_bytes()).unwrap();
    loop {
        if let TreeEvent::ChildExited { child, .. } = tokio::time::timeout(T, events.recv()).await.unwrap().unwrap() {
            assert_eq!(child, "late");
            break;
        }
    }
    assert!(
        crashed_at.elapsed() >= Duration::from_millis(100),
        "acted on the late event (or the watchdog), not before"
    );
    assert_eq!(total(&late, 4).await, 4, "restarted");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_sends_batches_through_restarts() {
    let backoff = Backoff::exponential(Duration::from_millis(200), Duration::from_millis(200)).jitter(0.0);
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(counter("b").backoff(backoff));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let b = rt.gpu("app/b").unwrap();
    let deltas: Vec<[u8; 8]> = (1..=10i64).map(|v| v.to_le_bytes()).collect();
    assert_eq!(b.send_batch(&deltas).unwrap(), 10);
    assert_eq!(total(&b, 0).await, 55);
    // While it restarts (a 200 ms backoff after a crash), a batch waits for the new incarnation.
    rt.device().inject(b.slot(), SlotFault::CrashNextMessage).unwrap();
    b.send(&1i64.to_le_bytes()).unwrap();
    eventually("restarting", || b.status() == ChildStatus::Restarting).await;
    assert_eq!(b.send_batch(&deltas[..4]).unwrap(), 4);
    assert_eq!(total(&b, 0).await, 10, "1 + 2 + 3 + 4 on fresh state");
    let too_big = [vec![0u8; 200]];
    assert!(matches!(b.send_batch(&too_big), Err(SendError::PayloadTooLarge { .. })));
    rt.root().terminate_child("b").await.unwrap();
    assert!(matches!(b.send_batch(&deltas[..2]), Err(SendError::Gone { .. })));
    assert_eq!(rt.dead_letters().stats().count(DeadLetterReason::DeadTarget), 2);
    rt.shutdown().await;
}

/// An idle actor is not stepped on the CPU backend, so its heartbeat stands still for as long as it idles;
/// only time with messages waiting counts against the watchdog's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_idle_longer_than_its_watchdog_bound_is_not_hung_when_work_arrives() {
    let watched = GpuChild::new("counter").heartbeat_timeout(Some(Duration::from_millis(250)));
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(ChildSpec::gpu("w", watched).name("app/w"));
    let rt = Runtime::start(config(), spec).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let w = rt.gpu("app/w").unwrap();
    assert_eq!(total(&w, 1).await, 1);
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await; // idle for more than twice the bound
        assert_eq!(total(&w, 1).await, round + 2, "state kept: no restart");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(event, TreeEvent::ChildExited { .. }), "no exit expected: {event:?}");
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_that_gives_up_ends_the_runtime_and_wait_says_why() {
    let spec = SupervisorSpec::new(Strategy::OneForOne).intensity(1, Duration::from_secs(60)).child(counter("c"));
    let rt = Runtime::start(config(), spec).await.unwrap();
    assert!(rt.is_running());
    let handle = rt.gpu("app/c").unwrap();
    // The first crash is within the intensity (1 restart); the second is one too many.
    for crash in 1..=2 {
        assert!(rt.is_running(), "still running before crash {crash}");
        handle.child().wait_running(T).await;
        rt.device().inject(handle.slot(), SlotFault::CrashNextMessage).unwrap();
        handle.send(&1i64.to_le_bytes()).unwrap();
        if crash == 1 {
            eventually("the restart", || rt.device().host_view(handle.slot()).unwrap().0 == 2).await;
        }
    }
    let end = tokio::time::timeout(T, rt.wait()).await.expect("the runtime ends");
    assert!(
        matches!(&end, RuntimeEnd::RootEnded { gave_up: true, reason: ExitReason::Shutdown, child: Some(c) } if c == "c"),
        "{end}"
    );
    assert!(end.to_string().contains("gave up") && end.to_string().contains("by child `c`"), "{end}");
    assert!(!rt.is_running());
    assert_eq!(rt.wait().await, end, "asking again gives the same answer at once");
    assert!(matches!(handle.send(&1i64.to_le_bytes()), Err(SendError::Gone { .. })));
    rt.shutdown().await;
}

/// Messages over one envelope's 96 bytes through a supervised GPU child (a device with bulk areas): a 4 KiB
/// call, and a large poison message that crashes the child, comes back whole as a dead letter, and leaves the
/// restarted child taking large messages again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_reach_a_supervised_child_and_come_back_whole_as_dead_letters() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("t", GpuChild::new("test").init(POISON.to_le_bytes())).name("app/t"));
    let rt = Runtime::start(config().bulk_bytes(16 * 1024), spec).await.unwrap();
    let t = rt.gpu("app/t").unwrap();
    let mut big = test_msg(1, 0, 0);
    big.extend((0..4096u32).map(|i| (i * 7) as u8));
    assert_eq!(t.call(&big, T).await.unwrap().payload().unwrap(), &big[..]);
    let mut poison = POISON.to_le_bytes().to_vec();
    poison.extend(vec![0xAB; 5000]);
    t.send(&poison).unwrap();
    eventually("the poison dead-lettered", || rt.dead_letters().stats().count(DeadLetterReason::Poison) == 1).await;
    let letter = rt.dead_letters().snapshot().into_iter().find(|l| l.reason == DeadLetterReason::Poison).unwrap();
    assert_eq!((letter.payload, letter.slot), (poison, Some(t.slot())));
    let code = Some(ringvisor::device::DeviceCode::Poison);
    assert_eq!((letter.generation, letter.code), (Some(1), code), "the incarnation it crashed, the code as data");
    let reply = t.call(&big, T).await.unwrap();
    assert_eq!((reply.generation, reply.payload().unwrap()), (2, &big[..]));
    let too_big = vec![0u8; 16 * 1024 + 1];
    let err = t.send(&too_big).unwrap_err();
    assert!(matches!(err, SendError::PayloadTooLarge { len: 16385, max: 16384 }), "{err}");
    rt.shutdown().await;
}

/// OTP's `sys:get_state` for a GPU child: the state between two messages, as bytes or as the behaviour's
/// struct; a fresh incarnation's state starts from zero; an ended child's handle says it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_reads_its_actors_state_as_bytes_or_typed() {
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    struct CounterState {
        total: i64,
        count: u64,
    }
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(counter("c").restart(Restart::Transient));
    let rt = Runtime::start(config().bulk_bytes(256), spec).await.unwrap();
    let c = rt.gpu("app/c").unwrap();
    for v in [40i64, 2] {
        c.send(&v.to_le_bytes()).unwrap();
    }
    let state: CounterState = c.state_typed(T).await.unwrap();
    assert_eq!(state, CounterState { total: 42, count: 2 });
    assert_eq!(c.state(T).await.unwrap().len(), 64, "the whole region");
    assert!(matches!(c.state_typed::<[u64; 9]>(T).await, Err(SendError::Device(_))));
    rt.device().inject(c.slot(), SlotFault::CrashNextMessage).unwrap();
    c.send(&1i64.to_le_bytes()).unwrap();
    // once the failure is known, a read waits for (and is answered by) the new incarnation
    eventually("the crash dead-lettered", || rt.dead_letters().stats().count(DeadLetterReason::Poison) == 1).await;
    assert_eq!(c.state_typed::<CounterState>(T).await.unwrap(), CounterState { total: 0, count: 0 });
    rt.root().terminate_child("c").await.unwrap();
    assert!(matches!(c.state(T).await, Err(SendError::Gone { .. })));
    rt.shutdown().await;
}

/// Typed messages without a C struct: rkyv archives of host types, of any size the device takes, through an
/// `echo` child; a reply that is not a valid archive of the asked type is a codec error, not garbage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_calls_with_rkyv_archives_validated_on_decode() {
    #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, PartialEq)]
    struct Reading {
        sensor: String,
        values: Vec<f32>,
    }
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("e", GpuChild::new("echo")).name("app/e"))
        .child(counter("c"));
    let rt = Runtime::start(config().bulk_bytes(8192), spec).await.unwrap();
    let (e, c) = (rt.gpu("app/e").unwrap(), rt.gpu("app/c").unwrap());
    let reading = Reading { sensor: "fleet/7".into(), values: (0..500).map(|i| i as f32 / 4.0).collect() };
    let back: Reading = e.call_archived(&reading, T).await.unwrap();
    assert_eq!(back, reading, "2 KiB of archive there and back");
    e.send_archived(&reading).unwrap();
    // the counter's 16-byte reply is not a `Reading` archive
    let err = c.call_archived::<i64, Reading>(&1, T).await.unwrap_err();
    assert!(matches!(err, SendError::Device(ringvisor::device::DeviceError::Codec(_))), "{err}");
    rt.shutdown().await;
}

/// One task waits for the runtime's end while another stops it, the runtime shared between them: the waiter
/// hears `Shutdown`, the tree and its device are stopped, and a second stop does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_waited_on_in_one_task_is_stopped_from_another() {
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(counter("c"));
    let rt = std::sync::Arc::new(Runtime::start(config(), spec).await.unwrap());
    let waiter = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.wait().await })
    };
    rt.stop().await;
    let end = tokio::time::timeout(T, waiter).await.expect("the waiter hears the end").unwrap();
    assert_eq!(end, RuntimeEnd::Shutdown);
    assert!(!rt.is_running());
    assert!(rt.device().kill(0).is_err(), "the device is shut down");
    rt.stop().await;
}
