//! Latency-mode calls in blocks, beside the spinning floor: the probe behind docs/benchmarks.md's latency-mode
//! sections. Each block is 5,000 `Device::call`s of an 8-byte echo on a device in the latency mode, then (unless
//! `NOFLOOR` is set) 5,000 round trips of two threads spinning on an atomic; it prints the median of the blocks'
//! medians of each, their ratio, and how many call blocks had a median over 5 µs (the trap of docs/benchmarks.md:
//! whole blocks of calls at 40-45 µs), and on stderr the median of each such block as it ends.
//!
//! `LATENCY_MODE=0` opens the device in the default mode instead (its calls beside the same floor).
//!
//! `SIZE=N` calls with an N-byte payload instead of 8 (over 96 bytes: through the slot's bulk areas, as the 4 KiB
//! round-trip rows do; up to 1 MiB), echoed back.
//!
//! `PLACEMENT=1` prints every block's placement, not only a trapped one's; a placement names, for the calling
//! thread and each of the device's threads, the CPU it last ran on, the CPUs it may run on and its voluntary /
//! involuntary context switches so far (`caller@1[0-1] 3/8737`).
//!
//! `GAP_NS=N` leaves N ns (spun, not slept) between calls, as a service whose calls do not come back to back.
//!
//! `PIN=caller,poller,workers` pins the calling thread, the device's poller and its workers to those CPUs, to force
//! a placement: `PIN=0,1,0` (the workers on the caller's CPU) is the trap's (run it with `NOFLOOR=1`: the floor's
//! second thread would share the caller's CPU). With `UNPIN` set as well, every CPU is allowed again right after:
//! the threads stay where they were put until something moves them, which is the trap as it arises unforced (the
//! device's cure, a waiting caller moving a worker off its CPU, cannot act on pinned threads). Each trapped
//! block's line names where the threads last ran (`name@cpu[allowed]`).
//!
//! ```text
//! cargo run --release -p ringvisor-bench --example latency_probe -- [BLOCKS, default 40]
//! ```

use std::time::{Duration, Instant};

use ringvisor::device::layout::RV_MAX_BULK_BYTES;
use ringvisor::device::message::PAYLOAD_BYTES;
use ringvisor::device::{Device, DeviceConfig};

#[path = "../src/floor.rs"]
mod floor;

const T: Duration = Duration::from_secs(10);
const PER_BLOCK: usize = 5_000;
/// A block of calls whose median is over this is a trapped one.
const SLOW_BLOCK_NS: f64 = 5_000.0;
/// Messages of the probe's `SIZE` each bulk area has room for.
const BULK_MESSAGES: usize = 16;
/// The largest `SIZE`: [`BULK_MESSAGES`] of them fill the largest bulk area.
const MAX_SIZE: usize = RV_MAX_BULK_BYTES as usize / BULK_MESSAGES;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Sets thread `tid`'s (0: the calling thread's) affinity to `cpus`.
fn set_affinity(tid: i32, cpus: impl IntoIterator<Item = usize>) {
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET writes inside it (CPUs past the set are skipped);
    // sched_setaffinity reads `set` only.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in cpus.into_iter().filter(|&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        eprintln!("cannot set thread {tid}'s CPUs: {}", std::io::Error::last_os_error());
    }
}

/// This process's threads, from /proc/self/task: (thread id, name, its task directory).
fn threads() -> Vec<(i32, String, std::path::PathBuf)> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .flatten()
        .filter_map(|entry| {
            let tid = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            Some((tid, comm.trim().to_string(), entry.path()))
        })
        .collect()
}

/// Allows the calling thread and the device's threads every CPU again.
fn unpin_all() {
    // not available_parallelism: that counts the CPUs this (pinned) thread may use
    // SAFETY: sysconf reads a system setting.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    set_affinity(0, 0..cpus);
    for (tid, comm, _) in threads() {
        if comm.starts_with("ringvisor-") {
            set_affinity(tid, 0..cpus);
        }
    }
}

/// `PIN`'s placement: the calling thread, then the device's threads found by name in /proc/self/task.
fn place(spec: &str) {
    let cpus: Vec<usize> = spec.split(',').filter_map(|c| c.trim().parse().ok()).collect();
    let [caller, poller, workers] = cpus[..] else {
        eprintln!("PIN wants three CPUs: caller,poller,workers (got {spec:?})");
        std::process::exit(2);
    };
    set_affinity(0, [caller]);
    for (tid, comm, _) in threads() {
        if comm.starts_with("ringvisor-polle") {
            set_affinity(tid, [poller]);
        } else if comm.starts_with("ringvisor-cpu") {
            set_affinity(tid, [workers]);
        }
    }
}

/// Where the calling thread and the device's threads ran last, and where they may run: `name@cpu[allowed]` for
/// each, from /proc/self/task (the stat file's 39th field, the status file's `Cpus_allowed_list`).
fn placement() -> String {
    // SAFETY: gettid takes nothing and cannot fail.
    let me = unsafe { libc::gettid() };
    let mut out = Vec::new();
    for (tid, comm, dir) in threads() {
        let caller = tid == me;
        if !(caller || comm.starts_with("ringvisor-")) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // fields after the parenthesised name: state is field 3, the CPU field 39
        let cpu = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(36)).unwrap_or("?");
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("?").trim().to_string();
        let allowed = field("Cpus_allowed_list:");
        let (vol, invol) = (field("voluntary_ctxt_switches:"), field("nonvoluntary_ctxt_switches:"));
        out.push(format!("{}@{cpu}[{allowed}] {vol}/{invol}", if caller { "caller" } else { comm.as_str() }));
    }
    out.join(" ")
}

fn main() {
    let blocks: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(40).max(1);
    let with_floor = std::env::var_os("NOFLOOR").is_none();
    let gap_ns: u64 = std::env::var("GAP_NS").ok().and_then(|g| g.parse().ok()).unwrap_or(0);
    let latency_mode = std::env::var("LATENCY_MODE").map_or(true, |v| v != "0");
    let every_placement = std::env::var_os("PLACEMENT").is_some();
    let size: usize = std::env::var("SIZE").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    if size > MAX_SIZE {
        eprintln!("SIZE {size} is over the probe's {MAX_SIZE} bytes");
        std::process::exit(2);
    }
    // room for BULK_MESSAGES such messages in each bulk area; none for a payload that fits an envelope
    let bulk = if size > PAYLOAD_BYTES { (size.next_power_of_two() * BULK_MESSAGES) as u32 } else { 0 };
    let config = DeviceConfig::default().slots(4).latency_mode(latency_mode).bulk_bytes(bulk);
    let device = Device::open(config).expect("device");
    device.create(0, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    if let Ok(spec) = std::env::var("PIN") {
        place(&spec);
        eprintln!("pinned: {}", placement());
        if std::env::var_os("UNPIN").is_some() {
            // every CPU allowed again: the threads stay where they are until the scheduler moves one, which is the
            // trap as it arises unforced
            unpin_all();
            eprintln!("unpinned: {}", placement());
        }
    }
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
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
                let reply = device.call(0, &payload, T).expect("call");
                let ns = t0.elapsed().as_nanos() as f64;
                assert_eq!(reply.payload().expect("echo").len(), size, "echoed");
                ns
            })
            .collect();
        let mut floor_ns = if with_floor { floor::spin_round_trips(PER_BLOCK) } else { Vec::new() };
        if block > 0 {
            let m = median(&mut call_ns);
            slow += usize::from(m > SLOW_BLOCK_NS);
            if m > SLOW_BLOCK_NS || every_placement {
                eprintln!("block {block}: median {m:.0} ns ({})", placement());
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
    let mode = if latency_mode { "latency-mode" } else { "default-mode" };
    print!("{mode} call ({size} B), median of {blocks} blocks' medians: {call:.0} ns (p25 {p25:.0}, p75 {p75:.0})");
    if with_floor {
        let floor = median(&mut floors);
        print!("; spinning floor {floor:.0} ns; ratio {:.2}", call / floor);
    }
    println!("; blocks over 5 µs: {slow} of {blocks}");
}
