//! `ringvisor-bench`: end-to-end benchmarks of ringvisor through a running kernel (the CPU backend), each
//! against a baseline measured in the same run. Prints a markdown table and writes it, as JSON, and an SVG
//! of the round-trip distributions, to `--out` (default `target/bench`).
//!
//! The full run ends with the CUDA rows (`cuda.rs`): the real GPU's where `RINGVISOR_BACKEND` names the CUDA backend,
//! else the emulated driver's prediction of them, beside the CPU backend's rows above them (none, with a message,
//! where NVRTC is missing).
//!
//! `cargo run --release -p ringvisor-bench -- [--quick] [--out DIR] [--only-tree N,N,...] [--only-mirrored N,...]
//! [--only-registry]
//! [--only-large] [--only-wgpu] [--only-remote] [--only-routed] [--only-liveness] [--only-cuda] [--only-calls]
//! [--contention] [--only-sends]`
//!
//! `--only-tree` measures only the supervised-tree rows, for the given tree sizes; `--only-registry` only the
//! pattern lookups; `--only-large` only the 4 KiB message rows; `--only-wgpu` only the WebGPU backend's rows
//! (beside the CPU backend's); `--only-remote` only the remote round trips over loopback (a second process:
//! this binary run with `--serve-node PORT`); `--only-routed` only the calls forwarded between two devices;
//! `--only-liveness` block 0 under a burst of creates on the backend `RINGVISOR_BACKEND` names (see
//! `liveness.rs`); `--only-cuda` the CUDA rows against the floor of the machine (see `cuda.rs`); `--only-calls`
//! the round trips and the one_for_one restarts (what a busy machine hurts first: run it beside a busy loop);
//! `--contention` the round trips and restarts with one busy thread per core in another process (this binary
//! run with `--burn`), against ractor's under the same contention (see `contention.rs`); `--only-sends` the
//! one-way throughput rows.

mod backends;
mod contention;
mod cuda;
mod floor;
mod heap;
mod liveness;
mod remote;
mod runtime;
mod scenarios;
mod stats;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

use std::path::PathBuf;

use ringvisor::device::DeviceConfig;

use scenarios::*;
use stats::{cdf_svg, markdown, scaling_svg, Row, Series};

fn main() {
    let mut quick = false;
    let mut out = PathBuf::from("target/bench");
    let mut only_tree: Option<Vec<u32>> = None;
    let mut only_mirrored: Option<Vec<u32>> = None;
    let mut only_registry = false;
    let mut only_large = false;
    let mut only_wgpu = false;
    let mut only_remote = false;
    let mut only_routed = false;
    let mut only_liveness = false;
    let mut only_cuda = false;
    let mut only_calls = false;
    let mut contention = false;
    let mut only_sends = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--out" => out = PathBuf::from(args.next().unwrap_or_else(|| usage("--out needs a directory"))),
            "--only-tree" => only_tree = Some(sizes("--only-tree", args.next())),
            "--only-mirrored" => only_mirrored = Some(sizes("--only-mirrored", args.next())),
            "--only-registry" => only_registry = true,
            "--only-large" => only_large = true,
            "--only-wgpu" => only_wgpu = true,
            "--only-remote" => only_remote = true,
            "--only-routed" => only_routed = true,
            "--only-liveness" => only_liveness = true,
            "--only-cuda" => only_cuda = true,
            "--only-calls" => only_calls = true,
            "--contention" => contention = true,
            "--only-sends" => only_sends = true,
            "--burn" => {
                contention::burn();
                return;
            }
            "--serve-node" => {
                let port =
                    args.next().and_then(|p| p.parse().ok()).unwrap_or_else(|| usage("--serve-node needs a port"));
                remote::serve_node(port);
                return;
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    let scale = if quick {
        Scale {
            latency_samples: 2_000,
            throughput_messages: 200_000,
            throughput_runs: 5,
            restart_samples: 1_000,
            group_samples: 5,
            scale_slots: 20_000,
            tree_sizes: vec![2_000, 20_000],
        }
    } else {
        Scale {
            latency_samples: 20_000,
            throughput_messages: 2_000_000,
            throughput_runs: 11,
            restart_samples: 2_000,
            group_samples: 30,
            scale_slots: 100_000,
            tree_sizes: vec![1_000, 10_000, 100_000],
        }
    };
    if only_sends {
        println!("{}", markdown(&send_rows(&scale)));
        return;
    }
    if contention {
        println!("{}", markdown(&contention::contention_rows(scale.latency_samples, scale.restart_samples)));
        return;
    }
    if only_calls {
        let (mut rows, _, condvar) = call_rows(&scale);
        rows.extend(restart_latency_rows(&scale, condvar));
        println!("{}", markdown(&rows));
        return;
    }
    if only_cuda {
        println!("{}", markdown(&cuda::cuda_rows(scale.latency_samples)));
        return;
    }
    if only_liveness {
        for line in liveness::liveness_lines(2_048, 2_000, 4_096, true)
            .into_iter()
            .chain(liveness::liveness_lines(2_048, 2_000, 1_024, false))
        {
            println!("{line}");
        }
        return;
    }
    if only_wgpu {
        println!("{}", markdown(&backends::wgpu_rows(scale.latency_samples, scale.throughput_messages, 3)));
        return;
    }
    if only_remote {
        println!("{}", markdown(&remote_rows(scale.latency_samples)));
        return;
    }
    if only_routed {
        println!("{}", markdown(&routed_rows(scale.latency_samples)));
        return;
    }
    if only_large {
        println!("{}", markdown(&large_message_rows(&scale)));
        return;
    }
    if only_registry {
        println!("{}", markdown(&registry_rows(scale.latency_samples)));
        return;
    }
    if let Some(sizes) = only_mirrored {
        let rows: Vec<Row> = sizes.into_iter().flat_map(mirrored_rows).collect();
        println!("{}", markdown(&rows));
        return;
    }
    if let Some(sizes) = only_tree {
        let mut rows = Vec::new();
        for n in sizes {
            rows.extend(tree_rows(n, scale.latency_samples));
        }
        println!("{}", markdown(&rows));
        return;
    }
    let rows = run(scale);
    let table = markdown(&rows.0);
    println!("{table}");
    std::fs::create_dir_all(&out).unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", out.display())));
    let json = serde_json::to_string_pretty(&rows.0).expect("rows serialise");
    let plots = [("round_trip.svg", rows.1), ("tree_start.svg", rows.2)];
    for (name, text) in [("results.md", table), ("results.json", json)].into_iter().chain(plots) {
        let path = out.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", path.display())));
        eprintln!("wrote {}", path.display());
    }
}

/// The tree sizes `flag` was given (`10000,100000`), or the usage and exit.
fn sizes(flag: &str, given: Option<String>) -> Vec<u32> {
    let given = given.unwrap_or_else(|| usage(&format!("{flag} needs sizes, e.g. 10000,100000")));
    let parsed: Result<Vec<u32>, _> = given.split(',').map(str::parse).collect();
    parsed.unwrap_or_else(|e| usage(&format!("{flag} {given}: {e}")))
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "error: {msg}\nusage: ringvisor-bench [--quick] [--out DIR] [--only-tree N,N,...] [--only-mirrored N,N,...] [--only-registry] \
         [--only-large] [--only-wgpu] [--only-remote] [--only-routed] [--only-liveness] [--only-cuda] \
         [--only-calls] [--contention] [--only-sends]"
    );
    std::process::exit(2)
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}

/// Starts and stops of each supervised tree (and of its ractor baseline, interleaved): one sample would be one
/// moment of a noisy machine.
const TREE_STARTS: usize = 5;

/// The rows of a supervised tree of `n` GPU children: start and stop against a ractor tree of the same size,
/// heap per child, idle CPU, and a call to one child against the same call in a tree of 100.
fn tree_rows(n: u32, calls: usize) -> Vec<Row> {
    eprintln!("supervised tree of {n} ...");
    let tree = supervised_tree(n, calls, TREE_STARTS);
    let ractor_mem = spawn_ractor_actors(n.min(10_000)).1;
    let small = supervised_tree(100, calls, 1);
    let scenario = |what: &str| format!("supervised tree of {n} GPU children: {what}");
    vec![
        Row::new(&scenario("start"), tree.start, tree.spawn_baseline, "<= 2x ractor", |_, _, r| r <= 2.0),
        Row::new(&scenario("stop"), tree.stop, tree.stop_baseline, "<= 2x ractor", |_, _, r| r <= 2.0),
        Row::new(&scenario("host memory per child"), tree.memory, ractor_mem, "<= 2 KiB", |v, _, _| v.median <= 2048.0),
        Row::new(&scenario("idle"), tree.idle_cpu.clone(), tree.idle_cpu, "<= 5% of one core", |v, _, _| {
            v.median <= 0.05
        }),
        Row::new(
            &scenario("call to one while the rest idle"),
            tree.call,
            small.call,
            "<= 2x the call in a tree of 100",
            |_, _, r| r <= 2.0,
        ),
        Row::new(
            &scenario("monitor sample (live view, progress lines)"),
            tree.sample,
            tree.first_sample,
            "no supervisor asked; <= 0.5x the first sample, which lists every child",
            |_, _, r| r <= 0.5,
        ),
    ]
}

/// The rows of a tree of `n` mirrored GPU children (a ractor actor each): start against ractor's spawn of as many
/// actors, heap per child against a plain ractor actor's.
fn mirrored_rows(n: u32) -> Vec<Row> {
    let ractor_mem = spawn_ractor_actors(n.min(10_000)).1;
    let ractor_per_actor = ractor_mem.median;
    let mut rows = Vec::new();
    for usage in [MirrorUse::OnDemand, MirrorUse::AllAsked, MirrorUse::Registered] {
        eprintln!("supervised tree of {n} mirrored children: {} ...", usage.label());
        let tree = mirrored_tree(n, TREE_STARTS, usage);
        let scenario = |what: &str| format!("supervised tree of {n} mirrored GPU children, {}: {what}", usage.label());
        rows.push(Row::new(&scenario("start"), tree.start, tree.spawn_baseline, "<= 2x ractor", |_, _, r| r <= 2.0));
        rows.push(Row::new(
            &scenario("host memory per child"),
            tree.memory,
            ractor_mem.clone(),
            "<= a plain ractor actor's",
            move |v, _, _| v.median <= ractor_per_actor,
        ));
    }
    rows
}

/// Pattern lookups among 100,000 names, against a linear scan: a `?` glob and two prefix globs.
fn registry_rows(samples: usize) -> Vec<Row> {
    eprintln!("registry ...");
    let cases = [("fleet/g42/s1?", 10), ("fleet/g42/s99*", 11), ("fleet/g42/s1*", 111)];
    let target = "median <= 2 µs and >= 50x faster than the scan";
    let met = |v: &stats::Summary, _: &stats::Summary, r: f64| v.median <= 2e3 && r <= 1.0 / 50.0;
    cases
        .iter()
        .zip(registry_lookups(samples, &cases))
        .flat_map(|(&(pattern, expected), (find, visit, scan))| {
            let scenario = format!("pattern lookup among 100,000 names: {pattern} ({expected} match)");
            [Row::new(&scenario, find, scan.clone(), target, met), Row::new(&scenario, visit, scan, target, met)]
        })
        .collect()
}

/// The remote round trip over loopback against ractor_cluster's remote call of a plain actor.
/// Kernel-to-kernel calls between devices (routed through the host) against the same within one device.
fn routed_rows(samples: usize) -> Vec<Row> {
    eprintln!("forwarded calls between devices ...");
    let (routed, local, direct) = forwarded_round_trip(samples);
    let target = "<= 3x the forward within one device";
    vec![
        Row::new("call forwarded to another device", routed.clone(), local, target, |_, _, r| r <= 3.0),
        Row::new("call forwarded to another device", routed, direct, "(context: a direct call)", |_, _, _| true),
    ]
}

fn remote_rows(samples: usize) -> Vec<Row> {
    eprintln!("remote round trip ...");
    let trips = remote::remote_round_trip(samples / 4);
    let target = "<= 1.5x ractor_cluster's remote call";
    let context = |_: &stats::Summary, _: &stats::Summary, _: f64| true;
    vec![
        Row::new("remote round trip over loopback", trips.gateway.clone(), trips.plain.clone(), target, |_, _, r| {
            r <= 1.5
        }),
        Row::new(
            "remote call of a mirrored GPU actor",
            trips.mirror.clone(),
            trips.gateway,
            "(context: the gateway)",
            context,
        ),
        Row::new("remote call of a mirrored GPU actor", trips.mirror, trips.plain, "(context: a plain actor)", context),
    ]
}

/// Rows for 4 KiB messages (large messages through the bulk areas).
fn large_message_rows(s: &Scale) -> Vec<Row> {
    eprintln!("large messages ...");
    let (device, ractor, small) = large_round_trip(4096, s.latency_samples);
    let (ours, chan) = large_one_way(4096, s.throughput_messages / 10, s.throughput_runs);
    vec![
        Row::new("round trip, 4 KiB", device.clone(), ractor, "<= 1x ractor call of a 4 KiB Vec", |_, _, r| r <= 1.0),
        Row::new("round trip, 4 KiB", device, small, "(context: the same call with 8 B)", |_, _, _| true),
        Row::new("one-way, 4 KiB, 1 producer", ours, chan, ">= 0.5x a crossbeam channel of 4 KiB", |_, _, r| r >= 0.5),
    ]
}

/// The round-trip rows (`Device::call`, the supervised handle, the latency mode, beside ractor's call, tokio,
/// a spinning pair and a parked pair), their plot, and the parked pair's summary (the restart rows' context).
fn call_rows(s: &Scale) -> (Vec<Row>, String, stats::Summary) {
    let mut rows = Vec::new();
    eprintln!("round trip ...");
    let mut rt = round_trip(s.latency_samples).into_iter();
    let (device, handle, ractor, tokio, floor, condvar) = (
        rt.next().unwrap(),
        rt.next().unwrap(),
        rt.next().unwrap(),
        rt.next().unwrap(),
        rt.next().unwrap(),
        rt.next().unwrap(),
    );
    rows.push(Row::new("round trip", device.clone(), ractor.clone(), "<= 0.2x ractor call", |_, _, r| r <= 0.2));
    rows.push(Row::new("round trip", device.clone(), floor.clone(), "<= 2x the spinning floor", |_, _, r| r <= 2.0));
    rows.push(Row::new("round trip", device.clone(), tokio.clone(), "(context)", |_, _, _| true));
    rows.push(Row::new("round trip", device.clone(), condvar.clone(), "(context: two parked hand-offs)", |_, _, _| {
        true
    }));
    rows.push(Row::new(
        "round trip, supervised handle",
        handle.clone(),
        ractor.clone(),
        "<= 0.2x ractor call",
        |_, _, r| r <= 0.2,
    ));
    let (latency_mode, latency_floor) = round_trip_latency_mode(s.latency_samples);
    rows.push(Row::new(
        "round trip, latency mode",
        latency_mode,
        latency_floor.clone(),
        "<= 3x the spinning floor",
        |_, _, r| r <= 3.0,
    ));
    eprintln!("a latency-mode call hop by hop ...");
    match call_breakdown(DeviceConfig::default().slots(4).latency_mode(true), s.latency_samples / 4 + 1) {
        Ok(hops) => rows.extend(hops.into_iter().map(|hop| {
            let target = "none: where a call's time goes, beside the floor";
            Row::new("round trip, latency mode, hop by hop", hop, latency_floor.clone(), target, |_, _, _| true)
        })),
        Err(e) => eprintln!("call breakdown: {e}"),
    }
    let svg =
        cdf_svg("Request-reply round trip (CDF), CPU backend", &[&device, &handle, &ractor, &tokio, &floor, &condvar]);
    (rows, svg, condvar)
}

/// The one_for_one restart rows: a GPU child (default and latency mode) against a ractor child, and against
/// the parked hand-off pair `condvar` (context).
fn restart_latency_rows(s: &Scale, condvar: stats::Summary) -> Vec<Row> {
    let mut rows = Vec::new();
    eprintln!("restart latency ...");
    let gpu = restart_latency(true, false, s.restart_samples);
    let host = restart_latency(false, false, s.restart_samples);
    let gpu_latency = restart_latency(true, true, s.restart_samples);
    rows.push(Row::new(
        "restart latency, one_for_one",
        gpu.clone(),
        condvar,
        "(context: parked hand-off pair)",
        |_, _, _| true,
    ));
    let restart_target = "median <= 1.5x ractor child, p99 <= 500 µs";
    let restart_met = |v: &stats::Summary, _: &stats::Summary, r: f64| r <= 1.5 && v.p99 <= 500e3;
    rows.push(Row::new("restart latency, one_for_one", gpu, host.clone(), restart_target, restart_met));
    rows.push(Row::new("restart latency, one_for_one, latency mode", gpu_latency, host, restart_target, restart_met));
    for latency_mode in [false, true] {
        let (device_part, tree_part) = restart_breakdown(latency_mode, s.restart_samples);
        rows.push(Row::new(
            "restart latency, one_for_one: where the time goes",
            device_part,
            tree_part,
            "(context: the device's part against the tree's)",
            |_, _, _| true,
        ));
    }
    rows
}

/// The one-way throughput rows: `send`, `send_batch(32)` and the coalescing sender, one producer and two, against
/// ractor's cast and a crossbeam channel.
fn send_rows(s: &Scale) -> Vec<Row> {
    eprintln!("one-way throughput ...");
    let mut rows = Vec::new();
    let runs = |producers, how| device_one_way(producers, s.throughput_messages, s.throughput_runs, how);
    let rows_of = [
        ("one-way, 64 B, 1 producer", 1, Sending::Single),
        ("one-way, 64 B, 2 producers", 2, Sending::Single),
        ("one-way, 64 B, 1 producer, batches of 32", 1, Sending::Batch(32)),
        ("one-way, 64 B, 2 producers, batches of 32", 2, Sending::Batch(32)),
        ("one-way, 64 B, 1 producer, coalescing sender", 1, Sending::Coalesced),
        ("one-way, 64 B, 2 producers, coalescing sender", 2, Sending::Coalesced),
    ]
    .map(|(scenario, producers, how)| (scenario, producers, runs(producers, how)));
    let cast1 = ractor_cast(1, s.throughput_messages, s.throughput_runs);
    let cast2 = ractor_cast(2, s.throughput_messages, s.throughput_runs);
    let fifteen_m = |v: &stats::Summary| v.median >= 15e6;
    let vs_cast = ">= 15 M/s and >= 2x ractor cast";
    let vs_chan = ">= 0.5x the crossbeam channel (runs in turn)";
    for (scenario, producers, (ringvisor, chan)) in rows_of {
        let cast = if producers == 1 { &cast1 } else { &cast2 };
        rows.push(Row::new(scenario, ringvisor.clone(), cast.clone(), vs_cast, move |v, _, r| {
            fifteen_m(v) && r >= 2.0
        }));
        rows.push(Row::new(scenario, ringvisor, chan, vs_chan, |_, _, r| r >= 0.5));
    }
    rows
}

fn run(s: Scale) -> (Vec<Row>, String, String) {
    let (mut rows, svg, condvar) = call_rows(&s);

    rows.extend(send_rows(&s));

    rows.extend(large_message_rows(&s));
    rows.extend(remote_rows(s.latency_samples));
    rows.extend(routed_rows(s.latency_samples));

    rows.extend(restart_latency_rows(&s, condvar));

    eprintln!("group restart ...");
    let group = group_restart(true, 1000, s.group_samples);
    let group_host = group_restart(false, 1000, s.group_samples);
    rows.push(Row::new("one_for_all over 1,000 children", group, group_host, "<= 0.5x ractor children", |_, _, r| {
        r <= 0.5
    }));
    let storm = restart_storm(true, 1000, s.group_samples);
    let storm_host = restart_storm(false, 1000, s.group_samples);
    rows.push(Row::new(
        "restart storm: 1,000 one_for_one children crash at once",
        storm,
        storm_host,
        "<= 1x ractor storm",
        |_, _, r| r <= 1.0,
    ));

    eprintln!("scale ...");
    let (time, mem) = create_slots(s.scale_slots);
    let (rtime, rmem) = spawn_ractor_actors(s.scale_slots);
    rows.push(Row::new(&format!("create {} slots", s.scale_slots), time, rtime, "<= 1 s", |v, _, _| v.median <= 1e9));
    rows.push(Row::new("memory per slot beyond rings", mem, rmem, "<= 1 KiB", |v, _, _| v.median <= 1024.0));

    // Every size's rows; the growth rows compare the two largest (a factor of 10 apart).
    let per_size: Vec<(u32, Vec<Row>)> = s.tree_sizes.iter().map(|&n| (n, tree_rows(n, s.latency_samples))).collect();
    let start_plot = tree_start_svg(&per_size);
    let [(small, small_rows), (large, large_rows)] = &per_size[per_size.len() - 2..] else { unreachable!() };
    let (small, large) = (*small, *large);
    let start_and_stop = |rows: &[Row]| (rows[0].ringvisor.clone(), rows[1].ringvisor.clone());
    let limit = large as f64 / small as f64 * 1.2;
    let linear = format!("<= {limit}x");
    let growth = |big: stats::Summary, little: stats::Summary, what: &str| {
        Row::new(
            &format!("supervised tree {what}: {large} against {small} children"),
            big,
            little,
            &linear,
            move |_, _, r| r <= limit,
        )
    };
    let (big_start, big_stop) = start_and_stop(large_rows);
    let (little_start, little_stop) = start_and_stop(small_rows);
    rows.extend(per_size.into_iter().flat_map(|(_, rows)| rows));
    rows.push(growth(big_start, little_start, "start"));
    rows.push(growth(big_stop, little_stop, "stop"));

    eprintln!("registry ...");
    rows.extend(registry_rows(s.latency_samples));
    rows.extend(backends::wgpu_rows(s.latency_samples, s.throughput_messages, 3));
    rows.extend(cuda::cuda_rows(s.latency_samples));
    (rows, svg, start_plot)
}

/// The plot of a supervised tree's start time against its size, with ractor's spawn of as many actors
/// (`per_size`: each size's [`tree_rows`], whose first row is the start).
fn tree_start_svg(per_size: &[(u32, Vec<Row>)]) -> String {
    let line = |name: &str, pick: fn(&Row) -> f64| Series {
        name: name.to_string(),
        points: per_size.iter().map(|(n, rows)| (f64::from(*n), pick(&rows[0]))).collect(),
    };
    scaling_svg(
        "Start of a supervised tree of N GPU children (median), CPU backend",
        "children",
        &[
            line("ringvisor: Runtime::start", |r| r.ringvisor.median),
            line("ractor: spawn N linked actors", |r| r.baseline.median),
        ],
    )
}
