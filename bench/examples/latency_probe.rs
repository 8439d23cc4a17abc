//! Latency-mode calls in blocks, beside the spinning floor: the probe behind docs/benchmarks.md's latency-mode
//! sections. Each block is 5,000 `Device::call`s of an 8-byte echo on a device in the latency mode, then (unless
//! `NOFLOOR` is set) 5,000 round trips of two threads spinning on an atomic; it prints the median of the blocks'
//! medians of each, their ratio, and how many call blocks had a median over 5 µs (the trap of docs/benchmarks.md:
//! whole blocks of calls at 40-45 µs), and on stderr the median of each such block as it ends.
//!
//! `LATENCY_MODE=0` opens the device in the default mode instead (its calls beside the same floor).
//!
//! `GAP_NS=N` leaves N ns (spun, not slept) between calls, as a service whose calls do not come back to back.
//!
//! `PIN=caller,poller,workers` pins the calling thread, the device's poller and its workers to those CPUs, to force
//! a placement: `PIN=0,1,0` (the workers on the caller's CPU) is the trap's (run it with `NOFLOOR=1`: the floor's
//! second thread would share the caller's CPU).
//!
//! ```text
//! cargo run --release -p ringvisor-bench --example latency_probe -- [BLOCKS, default 40]
//! ```

use std::time::{Duration, Instant};

use ringvisor::device::{Device, DeviceConfig};

#[path = "../src/floor.rs"]
mod floor;

const T: Duration = Duration::from_secs(10);
const PER_BLOCK: usize = 5_000;
/// A block of calls whose median is over this is a trapped one.
const SLOW_BLOCK_NS: f64 = 5_000.0;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Pins thread `tid` (0: the calling thread) to `cpu`.
fn pin(tid: i32, cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET writes inside it; sched_setaffinity reads `set` only.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        eprintln!("cannot pin thread {tid} to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
}

/// `PIN`'s placement: the calling thread, then the device's threads found by name in /proc/self/task.
fn place(spec: &str) {
    let cpus: Vec<usize> = spec.split(',').filter_map(|c| c.trim().parse().ok()).collect();
    let [caller, poller, workers] = cpus[..] else {
        eprintln!("PIN wants three CPUs: caller,poller,workers (got {spec:?})");
        std::process::exit(2);
    };
    pin(0, caller);
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    for entry in tasks.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else { continue };
        if comm.starts_with("ringvisor-polle") {
            pin(tid, poller);
        } else if comm.starts_with("ringvisor-cpu") {
            pin(tid, workers);
        }
    }
}

fn main() {
    let blocks: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(40).max(1);
    let with_floor = std::env::var_os("NOFLOOR").is_none();
    let gap_ns: u64 = std::env::var("GAP_NS").ok().and_then(|g| g.parse().ok()).unwrap_or(0);
    let latency_mode = std::env::var("LATENCY_MODE").map_or(true, |v| v != "0");
    let device = Device::open(DeviceConfig::default().slots(4).latency_mode(latency_mode)).expect("device");
    device.create(0, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    if let Ok(spec) = std::env::var("PIN") {
        place(&spec);
    }
    let payload = 7u64.to_le_bytes();
    let (mut calls, mut floors, mut slow) = (Vec::new(), Vec::new(), 0);
    // block 0 warms up and is not kept
    for block in 0..=blocks {
        let mut call_ns: Vec<f64> = (0..PER_BLOCK)
            .map(|_| {
                if gap_ns > 0 {
                    let until = Instant::now() + Duration::from_nanos(gap_ns);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
                let t0 = Instant::now();
                device.call(0, &payload, T).expect("call");
                t0.elapsed().as_nanos() as f64
            })
            .collect();
        let mut floor_ns = if with_floor { floor::spin_round_trips(PER_BLOCK) } else { Vec::new() };
        if block > 0 {
            let m = median(&mut call_ns);
            slow += usize::from(m > SLOW_BLOCK_NS);
            if m > SLOW_BLOCK_NS {
                eprintln!("block {block}: median {m:.0} ns");
            }
            calls.push(m);
            if with_floor {
                floors.push(median(&mut floor_ns));
            }
        }
    }
    device.shutdown();
    let call = median(&mut calls);
    let (p25, p75) = (calls[calls.len() / 4], calls[calls.len() * 3 / 4]);
    print!("latency-mode call, median of {blocks} blocks' medians: {call:.0} ns (p25 {p25:.0}, p75 {p75:.0})");
    if with_floor {
        let floor = median(&mut floors);
        print!("; spinning floor {floor:.0} ns; ratio {:.2}", call / floor);
    }
    println!("; blocks over 5 µs: {slow} of {blocks}");
}
