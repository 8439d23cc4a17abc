//! Restarts under supervision: one child, a group (one_for_all) and a storm (one_for_one), GPU children against
//! ractor children.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use ringvisor::device::{DeviceConfig, EventHook, EventKind, SlotEvent, SlotFault};
use ringvisor::prelude::*;
use ringvisor::supervisor::{ChildRef, StartContext, TreeEvent};

use super::{elapsed_ns, tokio, T};
use crate::stats::{Summary, Unit};

struct Crashy;
impl Actor for Crashy {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
    async fn handle(&self, _: ActorRef<()>, _: (), _: &mut ()) -> Result<(), ActorProcessingErr> {
        Err("crash".into())
    }
}

fn crashy(id: &str) -> ChildSpec {
    ChildSpec::actor(id, |ctx: StartContext| async move { ctx.spawn_linked(Crashy, ()).await })
}

/// Crashes a child: a GPU child through the device (the next message fails it), a `Crashy` host child by
/// the message it fails on.
async fn crash(r: &ringvisor::Runtime, child: &ChildRef) {
    match child.gpu() {
        Some(g) => {
            r.device().inject(g.slot(), SlotFault::CrashNextMessage).expect("inject");
            g.send(&1i64.to_le_bytes()).expect("send");
        }
        None => {
            let actor: ActorRef<()> = child.actor().expect("running").into();
            actor.cast(()).expect("cast");
        }
    }
}

async fn wait_starts(events: &mut tokio::sync::mpsc::UnboundedReceiver<TreeEvent>, n: usize) {
    let mut seen = 0;
    while seen < n {
        if let TreeEvent::ChildStarted { .. } =
            tokio::time::timeout(T, events.recv()).await.expect("restart").expect("events")
        {
            seen += 1;
        }
    }
}

/// A runtime whose tree is one supervisor (one_for_one, no intensity limit to speak of) over `child`, named
/// `b/c`; its handle, and the tree's events from now on.
async fn one_child(
    child: ChildSpec,
    config: DeviceConfig,
) -> (ringvisor::Runtime, ChildRef, tokio::sync::mpsc::UnboundedReceiver<TreeEvent>) {
    let spec =
        SupervisorSpec::new(Strategy::OneForOne).intensity(u32::MAX, Duration::from_secs(1)).child(child.name("b/c"));
    let r = ringvisor::Runtime::start(config, spec).await.expect("runtime");
    let handle = r.registry().lookup("b/c").expect("child");
    let events = r.services().events().subscribe();
    (r, handle, events)
}

/// Injected crash to Active again under one_for_one: a GPU child, and (gpu = false) a plain ractor child;
/// `latency_mode`: the device's host threads never park.
pub fn restart_latency(gpu: bool, latency_mode: bool, n: usize) -> Summary {
    let rt = tokio();
    rt.block_on(async {
        let child = if gpu { ChildSpec::gpu("c", GpuChild::new("counter")) } else { crashy("c") };
        let (r, handle, mut events) =
            one_child(child, DeviceConfig::default().slots(4).latency_mode(latency_mode)).await;
        let mut samples = Vec::with_capacity(n);
        for _ in 0..(n + n / 10) {
            let t0 = Instant::now();
            crash(&r, &handle).await;
            wait_starts(&mut events, 1).await;
            samples.push(elapsed_ns(t0));
        }
        r.shutdown().await;
        samples.drain(..n / 10);
        let name = match (gpu, latency_mode) {
            (true, false) => "ringvisor GPU child",
            (true, true) => "ringvisor GPU child, latency mode",
            (false, _) => "ractor child (same supervisor)",
        };
        Summary::of(name, samples, Unit::Nanos)
    })
}

/// Where a GPU child's one_for_one restart spends its time (in the default mode, or the latency mode): from the
/// injected crash until the host reads the slot's Failed event (the device's part: the crash message reaching the
/// actor, block 0 restarting it under the grant, the event read by the poller), and from there until the supervisor's
/// `ChildStarted` reaches the waiter (the tree's part: the notice to the supervisor's mailbox, its bookkeeping, the
/// tree event). The event is seen by a hook on the device's event path (`Device::on_event`), on the thread that reads
/// it.
pub fn restart_breakdown(latency_mode: bool, n: usize) -> (Summary, Summary) {
    let rt = tokio();
    rt.block_on(async {
        let child = ChildSpec::gpu("c", GpuChild::new("counter"));
        let (r, handle, mut events) =
            one_child(child, DeviceConfig::default().slots(4).latency_mode(latency_mode)).await;
        let failed_at = Arc::new(Mutex::new(None::<Instant>));
        let seen = failed_at.clone();
        let hook: Arc<EventHook> = Arc::new(move |e: &SlotEvent| {
            if e.event.kind == EventKind::Failed {
                seen.lock().expect("hook").get_or_insert_with(Instant::now);
            }
        });
        r.device().on_event(&hook);
        let (mut device_part, mut tree_part) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..(n + n / 10) {
            *failed_at.lock().expect("probe") = None;
            let t0 = Instant::now();
            crash(&r, &handle).await;
            wait_starts(&mut events, 1).await;
            let started = Instant::now();
            let failed = failed_at.lock().expect("probe").expect("the Failed event was read before the restart");
            if i >= n / 10 {
                device_part.push((failed - t0).as_nanos() as f64);
                tree_part.push((started - failed).as_nanos() as f64);
            }
        }
        r.shutdown().await;
        let mode = if latency_mode { ", latency mode" } else { "" };
        (
            Summary::of(
                &format!("GPU child{mode}: crash to its Failed event read on the host"),
                device_part,
                Unit::Nanos,
            ),
            Summary::of(
                &format!("GPU child{mode}: that event to the supervisor's ChildStarted"),
                tree_part,
                Unit::Nanos,
            ),
        )
    })
}

/// one_for_all over `children` children: one crashes; time until all are started again.
pub fn group_restart(gpu: bool, children: u32, n: usize) -> Summary {
    children_restart(Strategy::OneForAll, gpu, children, n)
}

/// A restart storm: one_for_one over `children` children that all crash at the same moment; time until all are
/// started again.
pub fn restart_storm(gpu: bool, children: u32, n: usize) -> Summary {
    children_restart(Strategy::OneForOne, gpu, children, n)
}

/// `children` children under one supervisor of `strategy`; crashes the first (one_for_all) or every child
/// (one_for_one, all at once), and times until `children` starts have been reported, `n` times.
fn children_restart(strategy: Strategy, gpu: bool, children: u32, n: usize) -> Summary {
    let rt = tokio();
    rt.block_on(async {
        let mut spec = SupervisorSpec::new(strategy).intensity(u32::MAX, Duration::from_secs(1));
        for i in 0..children {
            let id = format!("c{i}");
            spec = spec.child(
                if gpu { ChildSpec::gpu(&id, GpuChild::new("counter")) } else { crashy(&id) }.name(format!("b/{id}")),
            );
        }
        let config = DeviceConfig::default()
            .slots((children + 8).next_power_of_two())
            .inbox_capacity(16)
            .outbox_capacity(16)
            .state_bytes(64);
        let r = ringvisor::Runtime::start(config, spec).await.expect("runtime");
        let mut events = r.services().events().subscribe();
        let mut samples = Vec::with_capacity(n);
        let names: Vec<String> = match strategy {
            Strategy::OneForOne => (0..children).map(|i| format!("b/c{i}")).collect(),
            _ => vec!["b/c0".to_string()],
        };
        for _ in 0..n {
            let victims: Vec<ChildRef> = names.iter().map(|name| r.registry().lookup(name).expect("child")).collect();
            let t0 = Instant::now();
            for victim in &victims {
                crash(&r, victim).await;
            }
            wait_starts(&mut events, children as usize).await;
            samples.push(elapsed_ns(t0));
        }
        r.shutdown().await;
        Summary::of(
            if gpu { "ringvisor GPU children" } else { "ractor children (same supervisor)" },
            samples,
            Unit::Nanos,
        )
    })
}
