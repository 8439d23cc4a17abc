//! The WebGPU backend beside the CPU backend: the same scenarios on the raw device API, in the same run (the wgpu
//! rows run only where wgpu finds a Vulkan adapter, e.g. Mesa's lavapipe).

use std::time::{Duration, Instant};

use ringvisor::device::{Backend, CpuConfig, Device, DeviceConfig, DeviceError, WgpuConfig};

use crate::stats::{Row, Summary, Unit};

const T: Duration = Duration::from_secs(30);
const SLOTS: u32 = 16;

/// A device on `backend` whose liveness is not judged (`lost_after(None)`): these rows time rounds, and a loaded
/// machine must not turn a slow round into a lost device.
fn open(backend: &Backend) -> Device {
    open_with(backend, SLOTS)
}

/// A device of `slots` slots; past the rows' 16 slots, inboxes of 16 cells (a region must fit one storage buffer).
fn open_with(backend: &Backend, slots: u32) -> Device {
    let inbox = if slots > SLOTS { 16 } else { 1024 };
    let config = DeviceConfig::default().slots(slots).inbox_capacity(inbox).state_bytes(64).lost_after(None);
    Device::open(config.backend(backend.clone())).expect("device opens")
}

/// The row label of a device: `cpu backend`, or `wgpu on ADAPTER` (the adapter the device opened: lavapipe's
/// `llvmpipe`, a GPU's name).
fn name(d: &Device) -> String {
    let described = d.describe();
    match described.strip_prefix("wgpu on ") {
        Some(rest) => format!("wgpu on {}", rest.split(" (").next().unwrap_or(rest)),
        None => "cpu backend".into(),
    }
}

/// Median of `n` round trips of a 16-byte call to an echo actor on a device of `slots` slots, `active` of them
/// running (echo actors that sit idle but for the one called).
fn round_trip(backend: &Backend, n: usize, slots: u32, active: u32) -> Summary {
    let d = open_with(backend, slots);
    let created: Vec<_> = (0..active.max(1)).map(|s| d.create(s, "echo", &[]).expect("create")).collect();
    for c in created {
        c.wait_blocking(T).expect("created");
    }
    let payload = [7u8; 16];
    for _ in 0..n / 10 + 1 {
        d.call(0, &payload, T).expect("call");
    }
    let samples = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            d.call(0, &payload, T).expect("call");
            t0.elapsed().as_nanos() as f64
        })
        .collect();
    let label = format!("{} round trip, {active} of {slots} slots running", name(&d));
    d.shutdown();
    Summary::of(&label, samples, Unit::Nanos)
}

/// Messages per second through `send_batch` of 256 counter messages into 16 actors, `runs` runs of `messages`.
fn batched(backend: &Backend, messages: u64, runs: usize) -> Summary {
    let d = open(backend);
    for s in 0..SLOTS {
        d.create(s, "counter", &[]).expect("create").wait_blocking(T).expect("created");
    }
    let processed = |d: &Device| (0..SLOTS).map(|s| d.snapshot(s).expect("snapshot").messages_processed).sum::<u64>();
    let chunk = vec![1i64.to_le_bytes(); 256];
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let base = processed(&d);
        let t0 = Instant::now();
        let mut sent = 0u64;
        let mut slot = 0;
        while sent < messages {
            let want = chunk.len().min((messages - sent) as usize);
            match d.send_batch(slot, &chunk[..want]) {
                Ok(n) => sent += n as u64,
                Err(DeviceError::InboxFull { .. }) => std::thread::yield_now(),
                Err(e) => panic!("send_batch: {e}"),
            }
            slot = (slot + 1) % SLOTS;
        }
        while processed(&d) - base < messages {
            std::thread::sleep(Duration::from_micros(100));
        }
        samples.push(messages as f64 / t0.elapsed().as_secs_f64());
    }
    let label = format!("{} send_batch(256)", name(&d));
    d.shutdown();
    Summary::of(&label, samples, Unit::PerSecond)
}

/// Median of `n` restarts (kill, new generation, init) of a running actor, each waited for.
fn restart(backend: &Backend, n: usize) -> Summary {
    let d = open(backend);
    d.create(0, "test", &[]).expect("create").wait_blocking(T).expect("created");
    let samples = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            d.restart(0, "test", &[]).expect("restart").wait_blocking(T).expect("restarted");
            t0.elapsed().as_nanos() as f64
        })
        .collect();
    let label = format!("{} restart", name(&d));
    d.shutdown();
    Summary::of(&label, samples, Unit::Nanos)
}

/// The wgpu rows, each against the CPU backend in the same run; none when wgpu finds no adapter.
pub fn wgpu_rows(samples: usize, messages: u64, runs: usize) -> Vec<Row> {
    if ringvisor::device::wgpu_adapters().is_empty() {
        eprintln!("wgpu: no Vulkan adapter, no wgpu rows (apt-get install mesa-vulkan-drivers)");
        return Vec::new();
    }
    eprintln!("wgpu backend against the cpu backend ...");
    let cpu = Backend::Cpu(CpuConfig::default());
    let wgpu = Backend::Wgpu(WgpuConfig::default());
    let n = (samples / 10).max(100);
    let report = "none: reported beside the cpu backend";
    vec![
        Row::new(
            "wgpu backend: round trip, 16 B",
            round_trip(&wgpu, n, SLOTS, 1),
            round_trip(&cpu, n, SLOTS, 1),
            report,
            |_, _, _| true,
        ),
        Row::new(
            "wgpu backend: round trip among 2,048 slots, 1,024 of them idle actors",
            round_trip(&wgpu, n, 2048, 1024),
            round_trip(&wgpu, n, SLOTS, 1),
            "none: idle slots should cost little (a cheap scan; a full step only for slots with work)",
            |_, _, _| true,
        ),
        Row::new(
            "wgpu backend: one-way throughput, send_batch(256)",
            batched(&wgpu, messages / 10, runs),
            batched(&cpu, messages / 10, runs),
            report,
            |_, _, _| true,
        ),
        Row::new(
            "wgpu backend: restart of a running actor",
            restart(&wgpu, n / 2),
            restart(&cpu, n / 2),
            report,
            |_, _, _| true,
        ),
    ]
}
