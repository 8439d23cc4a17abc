//! The scenarios: each measures ringvisor end to end through a running kernel (the CPU backend) and its
//! baseline in the same process run.
//!
//! Over 600 lines: five families of scenarios (calls, restarts, fleets, kernel-to-kernel, load) that issue 34
//! splits into a module each; left whole until then so that one change moves them all.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ringvisor::device::{Device, DeviceConfig, DeviceError, SlotFault};
use ringvisor::prelude::*;
use ringvisor::supervisor::{ChildRef, Registry, StartContext, TreeEvent};
use tokio::runtime::Runtime as Tokio;

use crate::stats::{Summary, Unit};

/// How much to measure.
#[derive(Clone)]
pub struct Scale {
    pub latency_samples: usize,
    pub throughput_messages: u64,
    pub throughput_runs: usize,
    pub restart_samples: usize,
    pub group_samples: usize,
    pub scale_slots: u32,
    /// Supervised tree sizes, increasing (at least two; the growth rows compare the last two).
    pub tree_sizes: Vec<u32>,
}

const T: Duration = Duration::from_secs(10);

fn tokio() -> Tokio {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn elapsed_ns(t0: Instant) -> f64 {
    t0.elapsed().as_nanos() as f64
}

// ---------- round trip ----------

/// A ractor actor that answers each message with its value (`u64` for round trips, `Vec<u8>` for large ones).
struct Echo<T>(std::marker::PhantomData<fn() -> T>);
struct EchoMsg<T>(T, RpcReplyPort<T>);

// ringvisor's `cluster` feature (on here) turns on ractor's, under which each message type says it is one.
impl<T: Send + 'static> ractor::Message for EchoMsg<T> {}

/// An [`Echo`] of `u64`s (round trips; also the actor behind registry entries and spawned trees).
const ECHO: Echo<u64> = Echo(std::marker::PhantomData);

impl<T: Send + 'static> Actor for Echo<T> {
    type Msg = EchoMsg<T>;
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<EchoMsg<T>>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
    async fn handle(
        &self,
        _: ActorRef<EchoMsg<T>>,
        EchoMsg(v, reply): EchoMsg<T>,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let _ = reply.send(v);
        Ok(())
    }
}

/// The request-reply round trip of ringvisor (`Device::call`, and a supervised `GpuActorRef::call`) and its
/// baselines (ractor `call`, tokio mpsc + oneshot, two threads spinning on an atomic). All five systems are
/// up at once and measured in interleaved rounds (rotating order), so drift in the machine's load hits them
/// alike; idle ones park.
pub fn round_trip(n: usize) -> Vec<Summary> {
    const ROUNDS: usize = 20;
    let rt = tokio();
    let device = Device::open(DeviceConfig::default().slots(4)).expect("device");
    device.create(0, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    let payload = 7u64.to_le_bytes();
    let (runtime, handle) = rt.block_on(async {
        let spec =
            SupervisorSpec::new(Strategy::OneForOne).child(ChildSpec::gpu("e", GpuChild::new("echo")).name("b/e"));
        let r = ringvisor::Runtime::start(DeviceConfig::default().slots(4), spec).await.expect("runtime");
        let h = r.gpu("b/e").expect("echo");
        (r, h)
    });
    let echo = rt.block_on(async { Actor::spawn(None, ECHO, ()).await.expect("spawn").0 });
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, tokio::sync::oneshot::Sender<u64>)>(64);
    rt.spawn(async move {
        while let Some((v, reply)) = rx.recv().await {
            let _ = reply.send(v);
        }
    });
    let names = [
        "ringvisor Device::call",
        "ringvisor GpuActorRef::call",
        "ractor call",
        "tokio mpsc + oneshot",
        "two threads spinning on an atomic",
        "two threads through a condvar (parked)",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(n); names.len()];
    let per_round = (n / ROUNDS).max(1);
    for round in 0..=ROUNDS {
        for k in 0..names.len() {
            let which = (k + round) % names.len();
            let block: Vec<f64> = match which {
                0 => (0..per_round)
                    .map(|_| {
                        let t0 = Instant::now();
                        device.call(0, &payload, T).expect("call");
                        elapsed_ns(t0)
                    })
                    .collect(),
                1 => rt.block_on(async {
                    let mut v = Vec::with_capacity(per_round);
                    for _ in 0..per_round {
                        let t0 = Instant::now();
                        handle.call(&payload, T).await.expect("call");
                        v.push(elapsed_ns(t0));
                    }
                    v
                }),
                2 => rt.block_on(async {
                    let mut v = Vec::with_capacity(per_round);
                    for i in 0..per_round {
                        let t0 = Instant::now();
                        echo.call(|p| EchoMsg(i as u64, p), None).await.expect("call");
                        v.push(elapsed_ns(t0));
                    }
                    v
                }),
                3 => rt.block_on(async {
                    let mut v = Vec::with_capacity(per_round);
                    for i in 0..per_round {
                        let (otx, orx) = tokio::sync::oneshot::channel();
                        let t0 = Instant::now();
                        tx.send((i as u64, otx)).await.expect("send");
                        orx.await.expect("reply");
                        v.push(elapsed_ns(t0));
                    }
                    v
                }),
                4 => spin_block(per_round),
                _ => condvar_block(per_round),
            };
            // Round 0 warms every system up and is not kept.
            if round > 0 {
                samples[which].extend(block);
            }
        }
    }
    echo.stop(None);
    rt.block_on(runtime.shutdown());
    device.shutdown();
    names.iter().zip(samples).map(|(name, s)| Summary::of(name, s, Unit::Nanos)).collect()
}

/// `Device::call` round trips with the device in the latency mode (its workers and poller never park), and the
/// spinning floor, in interleaved rounds. Measured apart from [`round_trip`]: the latency mode's spinning
/// threads would take the cores the other systems are measured on.
pub fn round_trip_latency_mode(n: usize) -> (Summary, Summary) {
    const ROUNDS: usize = 20;
    let device = Device::open(DeviceConfig::default().slots(4).latency_mode(true)).expect("device");
    device.create(0, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    let payload = 7u64.to_le_bytes();
    let per_round = (n / ROUNDS).max(1);
    let (mut calls, mut floor) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for round in 0..=ROUNDS {
        let block: Vec<f64> = (0..per_round)
            .map(|_| {
                let t0 = Instant::now();
                device.call(0, &payload, T).expect("call");
                elapsed_ns(t0)
            })
            .collect();
        let spin = spin_block(per_round);
        if round > 0 {
            calls.extend(block);
            floor.extend(spin);
        }
    }
    device.shutdown();
    (
        Summary::of("ringvisor Device::call, latency mode", calls, Unit::Nanos),
        Summary::of("two threads spinning on an atomic", floor, Unit::Nanos),
    )
}

/// `n` ping-pong round trips between this thread and a peer, both parking on a condvar: the cost of two
/// thread wake-ups, the unit every hand-off between parked threads pays.
fn condvar_block(n: usize) -> Vec<f64> {
    let pair = Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
    let peer = pair.clone();
    let rounds = n as u64;
    let echo = std::thread::spawn(move || {
        let (m, c) = &*peer;
        for i in 0..rounds {
            let mut v = c.wait_while(m.lock().unwrap(), |v| *v != 2 * i + 1).unwrap();
            *v = 2 * i + 2;
            c.notify_all();
        }
    });
    let (m, c) = &*pair;
    let mut samples = Vec::with_capacity(n);
    for i in 0..rounds {
        let t0 = Instant::now();
        *m.lock().unwrap() = 2 * i + 1;
        c.notify_all();
        drop(c.wait_while(m.lock().unwrap(), |v| *v != 2 * i + 2).unwrap());
        samples.push(elapsed_ns(t0));
    }
    echo.join().expect("condvar peer");
    samples
}

/// `n` ping-pong round trips between this thread and a spinning peer.
fn spin_block(n: usize) -> Vec<f64> {
    let cell = Arc::new(AtomicU64::new(0));
    let peer = cell.clone();
    let rounds = n as u64;
    let echo = std::thread::spawn(move || {
        for i in 0..rounds {
            while peer.load(Ordering::Acquire) != 2 * i + 1 {
                spin_loop();
            }
            peer.store(2 * i + 2, Ordering::Release);
        }
    });
    let mut samples = Vec::with_capacity(n);
    for i in 0..rounds {
        let t0 = Instant::now();
        cell.store(2 * i + 1, Ordering::Release);
        while cell.load(Ordering::Acquire) != 2 * i + 2 {
            spin_loop();
        }
        samples.push(elapsed_ns(t0));
    }
    echo.join().expect("spinner");
    samples
}

// ---------- one-way throughput ----------

const PAYLOAD: [u8; 64] = [1; 64];

/// ringvisor: `producers` threads send 64-byte messages one way into 64 counter actors (`Device::send`, or
/// `Device::send_batch` with `batch` > 1) until `messages` are processed; one sample per run, in messages
/// per second.
pub fn device_one_way(producers: u32, messages: u64, runs: usize, batch: usize) -> Summary {
    const SLOTS: u32 = 64;
    let device =
        Device::open(DeviceConfig::default().slots(SLOTS).inbox_capacity(4096).state_bytes(64)).expect("device");
    for s in 0..SLOTS {
        device.create(s, "counter", &[]).expect("create").wait_blocking(T).expect("created");
    }
    let processed = |d: &Device| (0..SLOTS).map(|s| d.snapshot(s).expect("snapshot").messages_processed).sum::<u64>();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let base = processed(&device);
        let t0 = Instant::now();
        let threads: Vec<_> = (0..producers)
            .map(|p| {
                let device = device.clone();
                std::thread::spawn(move || {
                    let mine: Vec<u32> = (0..SLOTS).filter(|s| s % producers == p).collect();
                    let count = messages / u64::from(producers);
                    let chunk = vec![PAYLOAD; batch];
                    let mut i = 0u64;
                    while i < count {
                        let slot = mine[(i as usize / batch) % mine.len()];
                        let want = batch.min((count - i) as usize);
                        let sent = if batch == 1 {
                            device.send(slot, &PAYLOAD).map(|_| 1)
                        } else {
                            device.send_batch(slot, &chunk[..want])
                        };
                        match sent {
                            Ok(n) => i += n as u64,
                            Err(DeviceError::InboxFull { .. }) => spin_loop(),
                            Err(e) => panic!("send: {e}"),
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("producer");
        }
        let total = messages / u64::from(producers) * u64::from(producers);
        while processed(&device) - base < total {
            std::thread::sleep(Duration::from_micros(50));
        }
        samples.push(total as f64 / t0.elapsed().as_secs_f64());
    }
    device.shutdown();
    let how = if batch == 1 { "send".to_string() } else { format!("send_batch({batch})") };
    Summary::of(&format!("ringvisor {how}, {producers} producer(s)"), samples, Unit::PerSecond)
}

struct Count;
enum CountMsg {
    Add([u8; 64]),
    Get(RpcReplyPort<u64>),
}

impl ractor::Message for CountMsg {}

impl Actor for Count {
    type Msg = CountMsg;
    type State = u64;
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<CountMsg>, _: ()) -> Result<u64, ActorProcessingErr> {
        Ok(0)
    }
    async fn handle(&self, _: ActorRef<CountMsg>, msg: CountMsg, n: &mut u64) -> Result<(), ActorProcessingErr> {
        match msg {
            CountMsg::Add(p) => *n += u64::from(p[0]),
            CountMsg::Get(reply) => {
                let _ = reply.send(*n);
            }
        }
        Ok(())
    }
}

/// ractor `cast` of 64-byte messages into counting actors, from `producers` threads.
pub fn ractor_cast(producers: u32, messages: u64, runs: usize) -> Summary {
    let rt = tokio();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let actors: Vec<ActorRef<CountMsg>> =
            rt.block_on(async { futures_all((0..producers).map(|_| Actor::spawn(None, Count, ()))).await });
        let t0 = Instant::now();
        let threads: Vec<_> = actors
            .iter()
            .cloned()
            .map(|a| {
                std::thread::spawn(move || {
                    for _ in 0..messages / u64::from(producers) {
                        a.cast(CountMsg::Add(PAYLOAD)).expect("cast");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("producer");
        }
        let total = messages / u64::from(producers) * u64::from(producers);
        rt.block_on(async {
            let mut seen = 0;
            for a in &actors {
                seen += a.call(CountMsg::Get, None).await.expect("get").unwrap();
            }
            assert_eq!(seen, total, "every cast counted");
        });
        samples.push(total as f64 / t0.elapsed().as_secs_f64());
        for a in actors {
            a.stop(None);
        }
    }
    Summary::of(&format!("ractor cast, {producers} producer(s)"), samples, Unit::PerSecond)
}

async fn futures_all<F, T>(futs: impl Iterator<Item = F>) -> Vec<ActorRef<T>>
where
    F: std::future::Future<Output = Result<(ActorRef<T>, tokio::task::JoinHandle<()>), ractor::SpawnErr>>,
    T: ractor::Message,
{
    let mut out = Vec::new();
    for f in futs {
        out.push(f.await.expect("spawn").0);
    }
    out
}

/// A crossbeam bounded channel (capacity 4,096) from one thread to another: the ceiling of a bare ring.
pub fn crossbeam_channel(messages: u64, runs: usize) -> Summary {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (tx, rx) = crossbeam::channel::bounded::<[u8; 64]>(4096);
        let t0 = Instant::now();
        let consumer = std::thread::spawn(move || {
            let mut sum = 0u64;
            while let Ok(p) = rx.recv() {
                sum += u64::from(p[0]);
            }
            sum
        });
        for _ in 0..messages {
            tx.send(PAYLOAD).expect("send");
        }
        drop(tx);
        assert_eq!(consumer.join().expect("consumer"), messages);
        samples.push(messages as f64 / t0.elapsed().as_secs_f64());
    }
    Summary::of("crossbeam bounded channel, 1 producer", samples, Unit::PerSecond)
}

// ---------- large messages ----------

/// Round trips of a `size`-byte payload through an `echo` GPU actor (`Device::call`: the request crosses the
/// slot's inbox bulk area, the reply its outbox bulk area) and through a ractor actor that echoes a `Vec<u8>`
/// (`call`), in interleaved rounds; plus the device's 8-byte round trip in the same rounds, for what the size
/// costs. Returns (device `size`, ractor `size`, device 8 B).
pub fn large_round_trip(size: usize, n: usize) -> (Summary, Summary, Summary) {
    const ROUNDS: usize = 20;
    let rt = tokio();
    let device = Device::open(DeviceConfig::default().slots(2).bulk_bytes(64 * 1024)).expect("device");
    device.create(0, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    let echo = rt
        .block_on(async { Actor::spawn(None, Echo::<Vec<u8>>(std::marker::PhantomData), ()).await.expect("spawn").0 });
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let small = 7u64.to_le_bytes();
    let mut samples: Vec<Vec<f64>> = (0..3).map(|_| Vec::with_capacity(n)).collect();
    let per_round = (n / ROUNDS).max(1);
    for round in 0..=ROUNDS {
        for k in 0..3 {
            let which = (k + round) % 3;
            let block: Vec<f64> = match which {
                0 => (0..per_round)
                    .map(|_| {
                        let t0 = Instant::now();
                        let reply = device.call(0, &payload, T).expect("call");
                        let ns = elapsed_ns(t0);
                        assert_eq!(reply.payload().expect("echo").len(), size);
                        ns
                    })
                    .collect(),
                1 => rt.block_on(async {
                    let mut v = Vec::with_capacity(per_round);
                    for _ in 0..per_round {
                        let t0 = Instant::now();
                        let back = echo.call(|p| EchoMsg(payload.clone(), p), None).await.expect("call");
                        v.push(elapsed_ns(t0));
                        assert_eq!(back.expect("echo").len(), size);
                    }
                    v
                }),
                _ => (0..per_round)
                    .map(|_| {
                        let t0 = Instant::now();
                        device.call(0, &small, T).expect("call");
                        elapsed_ns(t0)
                    })
                    .collect(),
            };
            if round > 0 {
                samples[which].extend(block);
            }
        }
    }
    echo.stop(None);
    device.shutdown();
    let kib = size / 1024;
    let mut it = samples.into_iter();
    let mut next = |name: &str| Summary::of(name, it.next().expect("three"), Unit::Nanos);
    (
        next(&format!("ringvisor Device::call, {kib} KiB echoed")),
        next(&format!("ractor call, {kib} KiB Vec echoed")),
        next("ringvisor Device::call, 8 B echoed"),
    )
}

/// A `test` actor's message forwarding an echo of `id` to `address` (a slot, or a routed address).
fn forward_echo(address: u32, id: u32) -> Vec<u8> {
    [4, address, 1, id].iter().flat_map(|w: &u32| w.to_le_bytes()).collect()
}

/// A call forwarded by a GPU actor to an actor on another device (routed through the host: the sender's
/// outbox, the router, the target's inbox; the target's reply answers the call), against the same forward to
/// an actor on the sender's own device (the kernel-to-kernel ring) and a direct call (context), in interleaved
/// rounds. Two devices on one router: device 0 holds the forwarder (slot 0) and the local target (slot 1),
/// device 1 the remote target (slot 0).
pub fn forwarded_round_trip(n: usize) -> (Summary, Summary, Summary) {
    const ROUNDS: usize = 20;
    let router = ringvisor::device::Router::new();
    let a = Device::open(DeviceConfig::default().slots(2)).expect("device 0");
    let b = Device::open(DeviceConfig::default().slots(1)).expect("device 1");
    router.attach(0, &a).expect("attach 0");
    router.attach(1, &b).expect("attach 1");
    for (device, slot) in [(&a, 0), (&a, 1), (&b, 0)] {
        device.create(slot, "test", &[]).expect("create").wait_blocking(T).expect("created");
    }
    let remote = ringvisor::device::routed_address(1, 0).expect("address");
    let mut samples: Vec<Vec<f64>> = (0..3).map(|_| Vec::with_capacity(n)).collect();
    let per_round = (n / ROUNDS).max(1);
    for round in 0..=ROUNDS {
        for k in 0..3 {
            let which = (k + round) % 3;
            let block: Vec<f64> = (0..per_round as u32)
                .map(|id| {
                    let (slot, msg) = match which {
                        0 => (0, forward_echo(remote, id)),
                        1 => (0, forward_echo(1, id)),
                        _ => (1, forward_echo(0, id)[8..].to_vec()),
                    };
                    let t0 = Instant::now();
                    let reply = a.call(slot, &msg, T).expect("call");
                    let ns = elapsed_ns(t0);
                    assert_eq!(reply.payload().expect("echo")[4..8], id.to_le_bytes());
                    ns
                })
                .collect();
            if round > 0 {
                samples[which].extend(block);
            }
        }
    }
    assert_eq!(a.stats().unroutable, 0);
    a.shutdown();
    b.shutdown();
    let mut it = samples.into_iter();
    let mut next = |name: &str| Summary::of(name, it.next().expect("three"), Unit::Nanos);
    (
        next("ringvisor: call forwarded to another device"),
        next("ringvisor: call forwarded within one device"),
        next("ringvisor Device::call, direct"),
    )
}

/// One producer sending `size`-byte messages one way to `echo` GPU actors (no reply: the host copies each into
/// its slot's inbox bulk area, the actor takes it), against a crossbeam bounded channel of `size`-byte arrays
/// from one thread to another. Messages per second.
pub fn large_one_way(size: usize, messages: u64, runs: usize) -> (Summary, Summary) {
    const SLOTS: u32 = 8;
    let device =
        Device::open(DeviceConfig::default().slots(SLOTS).inbox_capacity(256).bulk_bytes(256 * 1024)).expect("device");
    for s in 0..SLOTS {
        device.create(s, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    }
    let processed = |d: &Device| (0..SLOTS).map(|s| d.snapshot(s).expect("snapshot").messages_processed).sum::<u64>();
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let (mut ours, mut chan) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let base = processed(&device);
        let t0 = Instant::now();
        let mut i = 0u64;
        while i < messages {
            match device.send((i % u64::from(SLOTS)) as u32, &payload) {
                Ok(_) => i += 1,
                Err(DeviceError::InboxFull { .. }) => spin_loop(),
                Err(e) => panic!("send: {e}"),
            }
        }
        while processed(&device) - base < messages {
            std::thread::sleep(Duration::from_micros(50));
        }
        ours.push(messages as f64 / t0.elapsed().as_secs_f64());

        let (tx, rx) = crossbeam::channel::bounded::<Box<[u8]>>(256);
        let t0 = Instant::now();
        let consumer = std::thread::spawn(move || {
            let mut n = 0u64;
            while let Ok(p) = rx.recv() {
                n += u64::from(p[0] == 0);
            }
            n
        });
        for _ in 0..messages {
            tx.send(payload.as_slice().into()).expect("send");
        }
        drop(tx);
        assert_eq!(consumer.join().expect("consumer"), messages);
        chan.push(messages as f64 / t0.elapsed().as_secs_f64());
    }
    device.shutdown();
    let kib = size / 1024;
    (
        Summary::of(&format!("ringvisor send, {kib} KiB, 1 producer"), ours, Unit::PerSecond),
        Summary::of(&format!("crossbeam bounded channel of {kib} KiB boxes"), chan, Unit::PerSecond),
    )
}

// ---------- restarts ----------

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

/// Injected crash to Active again under one_for_one: a GPU child, and (gpu = false) a plain ractor child;
/// `latency_mode`: the device's host threads never park.
pub fn restart_latency(gpu: bool, latency_mode: bool, n: usize) -> Summary {
    let rt = tokio();
    rt.block_on(async {
        let child =
            if gpu { ChildSpec::gpu("c", GpuChild::new("counter")).name("b/c") } else { crashy("c").name("b/c") };
        let spec = SupervisorSpec::new(Strategy::OneForOne).intensity(u32::MAX, Duration::from_secs(1)).child(child);
        let config = DeviceConfig::default().slots(4).latency_mode(latency_mode);
        let r = ringvisor::Runtime::start(config, spec).await.expect("runtime");
        let handle = r.registry().lookup("b/c").expect("child");
        let mut events = r.services().events().subscribe();
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

// ---------- scale ----------

/// Creating `slots` GPU actors (device open + one Create per slot through block 0): time, and heap memory
/// per slot beyond the device regions (rings, control blocks, state): the host-side bookkeeping.
pub fn create_slots(slots: u32) -> (Summary, Summary) {
    let before = crate::heap::live_bytes();
    let t0 = Instant::now();
    let config =
        DeviceConfig::default().slots(slots).inbox_capacity(4).outbox_capacity(4).k2k_capacity(2).state_bytes(64);
    let device = Device::open(config).expect("device");
    let mut pending = Vec::with_capacity(slots as usize);
    for s in 0..slots {
        pending.push(device.create(s, "counter", &[]).expect("create"));
    }
    for p in pending {
        p.wait_blocking(T).expect("created");
    }
    let time = elapsed_ns(t0);
    // The CPU backend maps its regions outside the heap: the heap's growth is all host bookkeeping.
    let beyond = (crate::heap::live_bytes() - before) as f64 / f64::from(slots);
    device.shutdown();
    (
        Summary::of(&format!("ringvisor, {slots} slots created"), vec![time], Unit::Nanos),
        Summary::of("ringvisor, memory per slot beyond regions", vec![beyond], Unit::Bytes),
    )
}

/// Spawning `n` idle ractor actors: time and heap memory per actor.
pub fn spawn_ractor_actors(n: u32) -> (Summary, Summary) {
    let rt = tokio();
    let before = crate::heap::live_bytes();
    let t0 = Instant::now();
    let actors = rt.block_on(async {
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(Actor::spawn(None, ECHO, ()).await.expect("spawn").0);
        }
        v
    });
    let time = elapsed_ns(t0);
    let per = (crate::heap::live_bytes() - before) as f64 / f64::from(n);
    for a in &actors {
        a.stop(None);
    }
    (
        Summary::of(&format!("ractor, {n} actors spawned"), vec![time], Unit::Nanos),
        Summary::of("ractor, memory per actor", vec![per], Unit::Bytes),
    )
}

// ---------- registry ----------

/// The baseline's matcher: `*` (a whole segment, or a trailing `*` after a literal prefix) and `?`.
fn glob_segment(pattern: &str, seg: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => seg.starts_with(prefix),
        None => pattern.len() == seg.len() && pattern.chars().zip(seg.chars()).all(|(p, c)| p == '?' || p == c),
    }
}

/// Pattern lookups among 100,000 names (`fleet/g0/s0` to `fleet/g99/s999`), one registry for every case:
/// for each `(pattern, expected matches)`, the registry's lookup and a linear scan of the names.
pub fn registry_lookups(n: usize, cases: &[(&str, usize)]) -> Vec<(Summary, Summary, Summary)> {
    let rt = tokio();
    let registry = Registry::new();
    let cell = rt.block_on(async { Actor::spawn(None, ECHO, ()).await.expect("spawn").0.get_cell() });
    let mut names = Vec::with_capacity(100_000);
    for g in 0..100 {
        for s in 0..1000 {
            let name = format!("fleet/g{g}/s{s}");
            registry.bind(&name, ChildRef::unsupervised(name.clone(), cell.clone())).expect("bind");
            names.push(name);
        }
    }
    let scan = |pattern: &str| {
        let pat: Vec<&str> = pattern.split('/').collect();
        names
            .iter()
            .filter(|name| {
                let segs: Vec<&str> = name.split('/').collect();
                segs.len() == pat.len() && segs.iter().zip(&pat).all(|(s, p)| glob_segment(p, s))
            })
            .count()
    };
    let time = |count: usize, lookup: &dyn Fn() -> usize, expected: usize| -> Vec<f64> {
        (0..count)
            .map(|_| {
                let t0 = Instant::now();
                assert_eq!(lookup(), expected);
                elapsed_ns(t0)
            })
            .collect()
    };
    cases
        .iter()
        .map(|&(pattern, expected)| {
            assert_eq!(registry.find(pattern).expect("find").len(), expected);
            let found = time(n, &|| registry.find(pattern).expect("find").len(), expected);
            let visited = time(n, &|| registry.for_each_match(pattern, |_, _| {}).expect("visit"), expected);
            let scanned = time((n / 50).max(50), &|| scan(pattern), expected);
            (
                Summary::of("registry pattern lookup (find)", found, Unit::Nanos),
                Summary::of("registry pattern visit (for_each_match)", visited, Unit::Nanos),
                Summary::of("linear scan", scanned, Unit::Nanos),
            )
        })
        .collect()
}

// ---------- supervised scale ----------

/// What a supervised tree of GPU children costs, from [`supervised_tree`].
pub struct TreeCost {
    /// `Runtime::start` of the whole tree (device open included), each start.
    pub start: Summary,
    /// `Runtime::shutdown` (every child stopped in reverse order, then the device), each stop.
    pub stop: Summary,
    /// The baseline of `start`: [`ractor_tree`]'s spawns, interleaved with the tree's starts.
    pub spawn_baseline: Summary,
    /// The baseline of `stop`: [`ractor_tree`]'s stops.
    pub stop_baseline: Summary,
    /// Heap bytes per supervised child beyond the device's regions (slot actor, handle, registry entry,
    /// tree bookkeeping).
    pub memory: Summary,
    /// Share of one core the process uses while the tree sits idle.
    pub idle_cpu: Summary,
    /// `GpuActorRef::call` round trip to one child while the others sit idle.
    pub call: Summary,
    /// A monitor's sample of the steady tree (its listings cached: no supervisor asked).
    pub sample: Summary,
    /// The monitor's first sample, which lists every child (`which_children` of each supervisor).
    pub first_sample: Summary,
}

/// The device configuration of the scale rows: `DeviceConfig::compact` sized for `children` (and a few
/// spare slots), as a user would size it.
fn compact_device(children: u32) -> DeviceConfig {
    DeviceConfig::compact().slots(children + 8)
}

/// Samples of the steady tree a monitor takes in [`supervised_tree`].
const MONITOR_SAMPLES: usize = 10;

/// One one_for_one supervisor with `children` `counter` GPU children (names `fleet/c<i>`), started and
/// stopped `starts` times, each time followed by the same for its ractor baseline (one noisy moment of the
/// machine falls on both); the first time also measures memory, idle CPU, `calls` calls to one child and the
/// monitor's samples.
pub fn supervised_tree(children: u32, calls: usize, starts: usize) -> TreeCost {
    let cost = steady_tree(children, calls);
    let (mut ours, mut theirs) = ((vec![cost.start], vec![cost.stop]), (Vec::new(), Vec::new()));
    for i in 0..starts {
        let (spawn, stop) = ractor_tree(children);
        theirs.0.push(spawn);
        theirs.1.push(stop);
        if i + 1 < starts {
            let (start, stop) = tree_start_stop(children);
            ours.0.push(start);
            ours.1.push(stop);
        }
    }
    let label = |what: &str| format!("ringvisor, {children} supervised GPU children, {what}");
    let baseline = |what: &str| format!("ractor, {children} linked actors under one actor, {what}");
    TreeCost {
        start: Summary::of(&label("start"), ours.0, Unit::Nanos),
        stop: Summary::of(&label("stop"), ours.1, Unit::Nanos),
        spawn_baseline: Summary::of(&baseline("spawn"), theirs.0, Unit::Nanos),
        stop_baseline: Summary::of(&baseline("stop"), theirs.1, Unit::Nanos),
        memory: cost.memory,
        idle_cpu: cost.idle_cpu,
        call: cost.call,
        sample: cost.sample,
        first_sample: cost.first_sample,
    }
}

/// The spec of [`supervised_tree`].
fn fleet(children: u32) -> SupervisorSpec {
    let mut spec = SupervisorSpec::new(Strategy::OneForOne);
    for i in 0..children {
        let id = format!("c{i}");
        spec = spec.child(ChildSpec::gpu(&id, GpuChild::new("counter")).name(format!("fleet/{id}")));
    }
    spec
}

/// One start and stop of [`fleet`], in nanoseconds.
fn tree_start_stop(children: u32) -> (f64, f64) {
    tokio().block_on(async {
        let spec = fleet(children);
        let t0 = Instant::now();
        let r = ringvisor::Runtime::start(compact_device(children), spec).await.expect("runtime");
        let start = elapsed_ns(t0);
        let t0 = Instant::now();
        r.shutdown().await;
        (start, elapsed_ns(t0))
    })
}

/// What one start of [`fleet`] measures beyond its start and stop.
struct SteadyTree {
    start: f64,
    stop: f64,
    memory: Summary,
    idle_cpu: Summary,
    call: Summary,
    sample: Summary,
    first_sample: Summary,
}

/// [`fleet`] started once: start, memory, idle CPU, `calls` calls to one child, the monitor's samples, stop.
fn steady_tree(children: u32, calls: usize) -> SteadyTree {
    let rt = tokio();
    rt.block_on(async {
        let spec = fleet(children);
        let before = crate::heap::live_bytes();
        let t0 = Instant::now();
        let r = ringvisor::Runtime::start(compact_device(children), spec).await.expect("runtime");
        let start = elapsed_ns(t0);
        // The regions are mapped outside the heap: its growth is all host bookkeeping.
        let per_child = (crate::heap::live_bytes() - before) as f64 / f64::from(children);
        let idle = idle_share(Duration::from_secs(3)).await;
        let handle = r.gpu(&format!("fleet/c{}", children / 2)).expect("child");
        let payload = 1i64.to_le_bytes();
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls + calls / 10 {
            let t0 = Instant::now();
            handle.call(&payload, T).await.expect("call");
            if i >= calls / 10 {
                samples.push(elapsed_ns(t0));
            }
        }
        let mut monitor = ringvisor::app::monitor::Monitor::new(&r);
        let t0 = Instant::now();
        monitor.sample(&r).await;
        let first_sample = elapsed_ns(t0);
        let mut samples_steady = Vec::with_capacity(MONITOR_SAMPLES);
        for _ in 0..MONITOR_SAMPLES {
            let t0 = Instant::now();
            monitor.sample(&r).await;
            samples_steady.push(elapsed_ns(t0));
        }
        assert_eq!(monitor.listings_asked(), 2, "a steady tree: the top supervisor and the root, listed once");
        let t0 = Instant::now();
        r.shutdown().await;
        let stop = elapsed_ns(t0);
        let label = |what: &str| format!("ringvisor, {children} supervised GPU children, {what}");
        SteadyTree {
            start,
            stop,
            memory: Summary::of(&label("heap per child beyond regions"), vec![per_child], Unit::Bytes),
            idle_cpu: Summary::of(&label("idle, share of one core"), vec![idle], Unit::Ratio),
            call: Summary::of(&label("call to one"), samples, Unit::Nanos),
            sample: Summary::of(&label("monitor sample, steady"), samples_steady, Unit::Nanos),
            first_sample: Summary::of(
                &label("monitor's first sample (lists every child)"),
                vec![first_sample],
                Unit::Nanos,
            ),
        }
    })
}

/// The share of one core this process used over `window` (user + system time from `/proc/self/stat`;
/// Linux's clock tick is 1/100 s).
async fn idle_share(window: Duration) -> f64 {
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
        let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }
    // Let the start's stragglers (parked workers' last sweeps, the poller) settle first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ticks, t0) = (cpu_ticks(), Instant::now());
    tokio::time::sleep(window).await;
    (cpu_ticks() - ticks) as f64 / 100.0 / t0.elapsed().as_secs_f64()
}

struct Spawner(u32);
impl Actor for Spawner {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, myself: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        for _ in 0..self.0 {
            Actor::spawn_linked(None, ECHO, (), myself.get_cell()).await?;
        }
        Ok(())
    }
    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        _: ractor::SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(()) // a stopped child is expected: the baseline stops them
    }
}

/// The baseline of [`supervised_tree`]: one ractor actor that spawns `children` linked ractor actors (start),
/// and stops them and itself (stop); nanoseconds.
pub fn ractor_tree(children: u32) -> (f64, f64) {
    let rt = tokio();
    rt.block_on(async {
        let t0 = Instant::now();
        let (sup, handle) = Actor::spawn(None, Spawner(children), ()).await.expect("spawn");
        let start = elapsed_ns(t0);
        let t0 = Instant::now();
        sup.stop_children_and_wait(None, None).await;
        sup.stop_and_wait(None, None).await.expect("stop");
        handle.await.expect("join");
        (start, elapsed_ns(t0))
    })
}
