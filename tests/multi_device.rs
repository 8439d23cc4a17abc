//! A runtime on several devices: GPU children placed by their spec (pinned, fewest in use, round robin; in
//! code and in TOML, with located errors for a device that does not exist), and a lost device that fails
//! only the children it held: they exit `device_lost`, the messages they held are dead letters with that
//! reason, and their supervisors restart them on the device that replaces it, or on another device when
//! they fail over, while the other device's actors keep running untouched.

mod support;

use std::time::{Duration, Instant};

use ringvisor::device::{DeviceConfig, DeviceError, DeviceHealth, SlotState};
use ringvisor::faults::InjectedFault;
use ringvisor::prelude::*;
use ringvisor::supervisor::*;

const T: Duration = Duration::from_secs(15);

fn config() -> DeviceConfig {
    DeviceConfig::default().slots(8).inbox_capacity(16).outbox_capacity(16).state_bytes(64)
}

fn counter(id: &str, gpu: GpuChild) -> ChildSpec {
    ChildSpec::gpu(id, gpu.heartbeat_timeout(Some(Duration::from_millis(200)))).name(format!("app/{id}"))
}

async fn total(actor: &GpuActorRef, delta: i64) -> Result<i64, SendError> {
    support::counter_total(actor, delta, T).await
}

async fn eventually(what: &str, f: impl FnMut() -> bool) {
    support::eventually(what, T, f).await
}

/// Which device of `rt` the child runs on.
fn device_of(rt: &Runtime, actor: &GpuActorRef) -> usize {
    let device = actor.device();
    rt.devices().iter().position(|d| d.same_device(&device)).expect("a device of the runtime")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_placed_by_their_spec_across_devices() {
    let mut spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(counter("pinned", GpuChild::new("counter").device(1)))
        .child(counter("slot", GpuChild::new("counter").device(1).slot(5)));
    for i in 0..4 {
        spec = spec.child(counter(&format!("f{i}"), GpuChild::new("counter")));
    }
    for i in 0..3 {
        spec = spec.child(counter(&format!("r{i}"), GpuChild::new("counter").placement(Placement::RoundRobin)));
    }
    let rt = Runtime::builder().devices([config(), config(), config()]).start(spec).await.unwrap();
    assert_eq!(rt.devices().len(), 3);
    let gpu = |name: &str| rt.gpu(&format!("app/{name}")).unwrap();
    assert_eq!(device_of(&rt, &gpu("pinned")), 1);
    assert_eq!((device_of(&rt, &gpu("slot")), gpu("slot").slot()), (1, 5));
    // Fewest in use: device 1 holds two already, so the four go to 0, 2, 0, 2 (the lowest index among equals).
    let fewest: Vec<usize> = (0..4).map(|i| device_of(&rt, &gpu(&format!("f{i}")))).collect();
    assert_eq!(fewest, [0, 2, 0, 2]);
    // Round robin: the devices in turn.
    let turns: Vec<usize> = (0..3).map(|i| device_of(&rt, &gpu(&format!("r{i}")))).collect();
    let mut sorted = turns.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 1, 2], "one each: {turns:?}");
    // Every child answers on its own device, and the slot numbers it holds are that device's.
    for name in ["pinned", "slot", "f0", "f1", "r0", "r2"] {
        assert_eq!(total(&gpu(name), 2).await.unwrap(), 2, "{name}");
        let (generation, state) = gpu(name).device().host_view(gpu(name).slot()).unwrap();
        assert_eq!((generation, state), (1, SlotState::Active), "{name}");
    }
    assert_eq!(rt.services().free_slots(), 3 * 8 - 9);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_does_not_exist_is_a_located_error() {
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(counter("ok", GpuChild::new("counter").device(1))).child(
        ChildSpec::supervisor(
            "inner",
            SupervisorSpec::new(Strategy::OneForOne).child(counter("far", GpuChild::new("counter").device(2))),
        ),
    );
    let err = Runtime::builder().devices([config(), config()]).start(spec).await.err().expect("refused");
    let text = err.to_string();
    assert!(text.contains("supervisor.children[1].supervisor.children[0].device: device 2 does not exist"), "{text}");
    assert!(text.contains("2 devices: 0 to 1"), "{text}");
    assert_eq!(text.matches("does not exist").count(), 1, "device 1 exists: {text}");

    let toml = r#"
        [supervisor]
        strategy = "one_for_one"
        [[supervisor.children]]
        id = "a"
        gpu = "counter"
        device = 3
        [[supervisor.children]]
        id = "b"
        gpu = "counter"
        placement = "everywhere"
        [[supervisor.children]]
        id = "c"
        actor = "x"
        device = 0
    "#;
    let loader = SpecLoader::new().devices(2).actor("x", |_ctx: StartContext| async { Err("never".to_string()) });
    let errors = loader.load_str(toml).expect_err("refused").0;
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["supervisor.children[0].device", "supervisor.children[1].placement", "supervisor.children[2].device"],
        "{errors:?}"
    );
    assert!(errors[0].message.contains("device 3 does not exist"), "{errors:?}");
    assert!(errors[2].message.contains("only a GPU child"), "{errors:?}");

    let err = Runtime::builder().devices([]).start(SupervisorSpec::new(Strategy::OneForOne)).await.err();
    assert!(matches!(err, Some(RuntimeError::NoDevice)), "{err:?}");
}

/// Two devices; `a` and `b` on device 0 (`b` fails over), `c` and `d` on device 1.
fn two_device_tree() -> SupervisorSpec {
    SupervisorSpec::new(Strategy::OneForOne)
        .intensity(10, Duration::from_secs(10))
        .child(counter("a", GpuChild::new("counter").device(0)))
        .child(counter("b", GpuChild::new("counter").device(0).failover(true)))
        .child(counter("c", GpuChild::new("counter").device(1)))
        .child(counter("d", GpuChild::new("counter").device(1)))
}

/// The four children of [`two_device_tree`], each seen answering (a fresh counter, given 5, says 5).
async fn answering_children(rt: &Runtime) -> [GpuActorRef; 4] {
    let children = ["a", "b", "c", "d"].map(|name| rt.gpu(&format!("app/{name}")).unwrap());
    for actor in &children {
        assert_eq!(total(actor, 5).await.unwrap(), 5);
    }
    children
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_device_fails_only_its_children_which_restart_on_its_replacement_or_fail_over() {
    let lossy = config().lost_after(Some(Duration::from_millis(300)));
    let rt = Runtime::builder().devices([lossy.clone(), lossy]).start(two_device_tree()).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let (old0, dev1) = (rt.device_at(0).unwrap(), rt.device_at(1).unwrap());
    let [a, b, c, d] = answering_children(&rt).await;
    let before = [c.slot(), d.slot()].map(|s| dev1.host_view(s).unwrap());

    // Device 0 halts: what is sent to its actors now is held, then handed back when it is declared lost.
    assert_eq!(rt.faults().inject("app/a", InjectedFault::LoseDevice).unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let held_call = {
        let a = a.clone();
        tokio::spawn(async move { a.call(&1i64.to_le_bytes(), T).await })
    };
    b.send(&1i64.to_le_bytes()).unwrap();
    let outcome = held_call.await.unwrap();
    assert!(matches!(outcome, Err(SendError::Undelivered { reason: DeadLetterReason::DeviceLost, .. })), "{outcome:?}");
    assert_eq!(old0.health(), DeviceHealth::Lost);

    // a and b exit `device_lost` and start again; a on device 0's replacement, b (failover) on device 1.
    let mut exits = Vec::new();
    let mut moves = Vec::new();
    let deadline = Instant::now() + T;
    while exits.len() < 2 || moves.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await.expect("exits and moves").unwrap() {
            TreeEvent::ChildExited { child, reason, .. } => exits.push((child, reason)),
            TreeEvent::DeviceMoved { child, from, to } => moves.push((child, from.0, to.0)),
            _ => {}
        }
    }
    exits.sort_by(|x, y| x.0.cmp(&y.0));
    let lost = ExitReason::Abnormal(stop_reason::DEVICE_LOST.to_string());
    assert_eq!(exits, [("a".to_string(), lost.clone()), ("b".to_string(), lost)]);
    moves.sort();
    assert_eq!(moves, [("a".to_string(), 0, 0), ("b".to_string(), 0, 1)]);
    eventually("a and b running", || a.status() == ChildStatus::Running && b.status() == ChildStatus::Running).await;

    // The same handles reach the restarted children, from fresh state, on their new devices.
    let new0 = rt.device_at(0).unwrap();
    assert!(!new0.same_device(&old0), "device 0 was replaced");
    assert_eq!(new0.health(), DeviceHealth::Running);
    assert!(a.device().same_device(&new0));
    assert!(b.device().same_device(&dev1));
    assert_eq!(total(&a, 3).await.unwrap(), 3);
    assert_eq!(total(&b, 4).await.unwrap(), 4);

    // Device 1's actors were not touched: same device, same incarnations, their state kept.
    assert!(rt.device_at(1).unwrap().same_device(&dev1));
    assert_eq!([c.slot(), d.slot()].map(|s| dev1.host_view(s).unwrap()), before);
    assert_eq!(total(&c, 1).await.unwrap(), 6);
    assert_eq!(total(&d, 1).await.unwrap(), 6);
    assert!(exits_of(&mut events, &["c", "d"]).is_empty(), "c and d never exited");

    // Every message the lost device held is a dead letter with the reason: the call and the send.
    assert_eq!(rt.dead_letters().stats().count(DeadLetterReason::DeviceLost), 2, "{}", rt.dead_letters().stats());
    assert!(rt.is_running(), "no whole-tree restart");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_quarantined_slots_on_one_of_several_devices_replace_that_device_only() {
    let rt = Runtime::builder().devices([config(), config()]).quarantine_limit(1).start(two_device_tree()).await;
    let rt = rt.unwrap();
    let (dev0, old1) = (rt.device_at(0).unwrap(), rt.device_at(1).unwrap());
    let [a, b, c, d] = answering_children(&rt).await;
    let before = [a.slot(), b.slot()].map(|s| dev0.host_view(s).unwrap());

    // c and d wedge: each is quarantined and moves to another slot of device 1; two quarantined slots are
    // over the limit of 1, so device 1 is given up on as a lost device and replaced.
    for name in ["app/c", "app/d"] {
        rt.faults().inject(name, InjectedFault::Wedge).unwrap();
        rt.gpu(name).unwrap().send(&1i64.to_le_bytes()).unwrap();
    }
    eventually("device 1 replaced", || !rt.device_at(1).unwrap().same_device(&old1)).await;
    assert_eq!(old1.health(), DeviceHealth::Lost);
    let cause = old1.loss_cause().unwrap_or_default();
    assert!(cause.contains("slots quarantined on device 1"), "{cause}");
    // (until their supervisor has heard of the loss, c and d may still read Running on the old device)
    let new1 = rt.device_at(1).unwrap();
    eventually("c and d running on the new device", || {
        [&c, &d].iter().all(|x| x.status() == ChildStatus::Running && x.device().same_device(&new1))
    })
    .await;
    assert_eq!(total(&c, 2).await.unwrap(), 2, "from fresh state on the new device");
    assert_eq!(total(&d, 3).await.unwrap(), 3);
    assert!(rt.services().quarantined_slots_on(1).is_empty(), "the new device has no quarantined slot");

    // Device 0 was not touched: same device, same incarnations, state kept; no whole-tree restart.
    assert!(rt.device_at(0).unwrap().same_device(&dev0));
    assert_eq!([a.slot(), b.slot()].map(|s| dev0.host_view(s).unwrap()), before);
    assert_eq!(total(&a, 1).await.unwrap(), 6);
    assert_eq!(total(&b, 1).await.unwrap(), 6);
    assert!(rt.is_running());
    rt.shutdown().await;
}

/// The exits among the events already received that concern `children`.
fn exits_of(events: &mut tokio::sync::mpsc::UnboundedReceiver<TreeEvent>, children: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let TreeEvent::ChildExited { child, .. } = e {
            if children.contains(&child.as_str()) {
                found.push(child);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_device_a_lost_device_still_restarts_the_whole_tree() {
    let lossy = config().lost_after(Some(Duration::from_millis(300)));
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(counter("a", GpuChild::new("counter")));
    let rt = Runtime::builder().devices([lossy]).start(spec).await.unwrap();
    let old = rt.device();
    let a = rt.gpu("app/a").unwrap();
    assert_eq!(total(&a, 1).await.unwrap(), 1);
    rt.faults().inject("app/a", InjectedFault::LoseDevice).unwrap();
    eventually("a new device", || !rt.device().same_device(&old)).await;
    // The tree was started again: a new child behind the name, the old handle gone.
    eventually("a new a", || rt.gpu("app/a").is_some_and(|n| !n.child().same_child(&a.child()))).await;
    eventually("the old handle ends", || a.status().has_ended()).await;
    rt.shutdown().await;
}

/// A `test` behaviour message: forward the echo of `id` to `address` (the echo answers the host's call).
fn forward_echo(address: u32, id: u32) -> Vec<u8> {
    let mut msg = Vec::with_capacity(24);
    msg.extend_from_slice(&4u32.to_le_bytes()); // forward
    msg.extend_from_slice(&address.to_le_bytes());
    msg.extend_from_slice(&1u32.to_le_bytes()); // echo
    msg.extend_from_slice(&id.to_le_bytes());
    msg.extend_from_slice(&0u64.to_le_bytes());
    msg
}

/// The id an echo message (or its echo) carries.
fn echo_id(payload: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(payload.get(4..8)?.try_into().ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_to_kernel_messages_between_devices_are_answered_or_dead_lettered_once_through_restarts() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(100, Duration::from_secs(10))
        .child(counter("fwd", GpuChild::new("test").device(0)))
        .child(counter("echo", GpuChild::new("test").device(1)));
    let rt = Runtime::builder().devices([config(), config()]).start(spec).await.unwrap();
    let (fwd, echo) = (rt.gpu("app/fwd").unwrap(), rt.gpu("app/echo").unwrap());
    let address = echo.address().expect("a routed address");
    assert_eq!((device_of(&rt, &fwd), device_of(&rt, &echo)), (0, 1));

    // Four callers, each a call at a time through `fwd` (device 0) to `echo` (device 1); meanwhile `echo` is
    // crashed and killed (its supervisor restarts it at the same address) at points of the traffic. The traffic
    // runs in phases, each fault injected between two, so that calls follow every fault however fast they are
    // (with a fixed number of calls and faults at counts, a fast machine had answered them all before the first).
    use std::sync::atomic::Ordering::Relaxed;
    let faults = [
        InjectedFault::CrashNextMessage,
        InjectedFault::KillDeviceActor,
        InjectedFault::CrashNextMessage,
        InjectedFault::CrashNextMessage,
    ];
    let (tasks, per_phase) = (4u32, 15u32);
    let phases = faults.len() as u32 + 1;
    let per_task = per_phase * phases;
    let phase_open = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let phase_calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let (fwd, phase_open, phase_calls) = (fwd.clone(), phase_open.clone(), phase_calls.clone());
        callers.spawn(async move {
            let mut outcomes = Vec::new();
            for i in 0..per_task {
                let phase = i / per_phase;
                while phase_open.load(Relaxed) < phase {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let id = t * per_task + i;
                let started = Instant::now();
                let outcome = fwd.call(&forward_echo(address, id), T).await;
                assert!(started.elapsed() < T + Duration::from_secs(3), "call {id} answered within its deadline");
                outcomes.push((id, outcome));
                phase_calls.fetch_add(1, Relaxed);
            }
            outcomes
        });
    }
    for (phase, fault) in (1..).zip(faults) {
        eventually("a phase of traffic", || phase_calls.load(Relaxed) >= phase * tasks * per_phase).await;
        rt.faults().inject("app/echo", fault).unwrap();
        phase_open.store(phase, Relaxed);
    }
    let mut answered = 0;
    let mut failed = std::collections::BTreeSet::new();
    while let Some(outcomes) = callers.join_next().await {
        for (id, outcome) in outcomes.unwrap() {
            match outcome {
                Ok(reply) => {
                    assert_eq!(echo_id(reply.payload().unwrap()), Some(id), "the echo of call {id}");
                    assert_eq!(reply.slot, echo.slot(), "answered by echo, on device 1");
                    answered += 1;
                }
                Err(SendError::Undelivered { .. } | SendError::Device(DeviceError::Unroutable { .. })) => {
                    failed.insert(id);
                }
                Err(e) => panic!("call {id}: {e:?}"),
            }
        }
    }
    assert_eq!(answered + failed.len() as u32, tasks * per_task);
    assert!(!failed.is_empty(), "the crashes and the kill cost some calls");

    // Exactly the failed calls are dead letters, once each, filed under echo, sent by fwd on device 0.
    let letters = rt.dead_letters().snapshot();
    let mut lettered: Vec<u32> = letters.iter().filter_map(|l| echo_id(&l.payload)).collect();
    lettered.sort_unstable();
    assert_eq!(lettered, failed.iter().copied().collect::<Vec<_>>(), "{letters:#?}");
    let fwd_address = Origin::Routed { device: 0, slot: fwd.slot() };
    for l in &letters {
        assert_eq!((l.origin, l.target.as_deref()), (fwd_address, Some("app/echo")), "{l:?}");
    }
    assert!(rt.dead_letters().stats().count(DeadLetterReason::Poison) >= 1, "{}", rt.dead_letters().stats());

    // Every routed message is accounted for by the devices too: read out of device 0, into device 1.
    let (d0, d1) = (rt.device_at(0).unwrap().stats(), rt.device_at(1).unwrap().stats());
    assert_eq!(d0.routed_out + d0.unroutable, (tasks * per_task) as u64, "{d0:?}");
    assert_eq!(d1.routed_in, d0.routed_out);
    rt.shutdown().await;
}
