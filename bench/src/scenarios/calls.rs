//! Round trips: a call through a running kernel (`Device::call`, the supervised handle, the latency mode, large payloads,
//! calls forwarded between devices) against ractor's, tokio's and a spinning thread's.

use std::sync::Arc;
use std::time::Instant;

use ractor::Actor;
use ringvisor::device::{Device, DeviceConfig};
use ringvisor::prelude::*;

use super::{elapsed_ns, tokio, Echo, EchoMsg, ECHO, T};
use crate::floor::spin_round_trips;
use crate::stats::{Summary, Unit};

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
                4 => spin_round_trips(per_round),
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
        let spin = spin_round_trips(per_round);
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

/// `n` traced round trips of an 8-byte call to an echo actor on a device opened with `config`
/// ([`Device::trace_call`]): one summary per hop, in order, then the whole traced call (a traced call reads the
/// clock a few more times than a plain one: each stamp costs about a clock read).
pub fn call_breakdown(config: DeviceConfig, n: usize) -> Result<Vec<Summary>, String> {
    let mode = if config.latency_mode { ", latency mode" } else { "" };
    let d = Device::open(config).map_err(|e| e.to_string())?;
    d.create(0, "echo", &[]).and_then(|p| p.wait_blocking(T)).map_err(|e| e.to_string())?;
    let payload = [7u8; 8];
    for _ in 0..n / 10 {
        d.call(0, &payload, T).map_err(|e| e.to_string())?;
    }
    let mut hops: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut totals = Vec::with_capacity(n);
    for _ in 0..n {
        let (_, trace) = d.trace_call(0, &payload, T).map_err(|e| e.to_string())?;
        for (i, (name, ns)) in trace.hops().into_iter().enumerate() {
            if hops.len() <= i {
                hops.push((name, Vec::with_capacity(n)));
            }
            hops[i].1.push(ns as f64);
        }
        totals.push(trace.total_ns() as f64);
    }
    d.shutdown();
    let mut out: Vec<Summary> = hops
        .into_iter()
        .enumerate()
        .map(|(i, (name, samples))| Summary::of(&format!("hop {}{mode}: {name}", i + 1), samples, Unit::Nanos))
        .collect();
    out.push(Summary::of(&format!("traced call{mode}, whole"), totals, Unit::Nanos));
    Ok(out)
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
