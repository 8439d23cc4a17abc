//! The contention scenario (issue 37): one busy thread per core, in another process (this binary run with
//! `--burn`), beside the measured one, while the round trips and the restarts are measured against ractor's
//! call and ractor's child restart, measured under the same contention. A GPU server's host cores are rarely
//! idle: a path that waits for another thread of ours to be scheduled must not fall off a cliff when they are
//! not.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

use crate::remote;
use crate::scenarios::*;
use crate::stats::{Row, Summary};

/// `--burn`: one thread per core spinning until stdin closes. Prints `burning` once they run.
pub fn burn() {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    println!("burning {cores}");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
}

/// The burning process; stopped when dropped.
struct Burners(Child);

impl Burners {
    fn start() -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .arg("--burn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the burning process");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its first line");
        assert!(line.starts_with("burning"), "the burning process did not start: {line}");
        eprintln!("contention: {} busy threads beside this process", line.trim().trim_start_matches("burning "));
        Self(child)
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        if self.0.wait().is_err() {
            let _ = self.0.kill();
        }
    }
}

/// The rows of the scenario: each round trip within 2x ractor's call (a remote one: ractor_cluster's remote
/// call), each restart within 2x ractor's child restart, every baseline measured under the same contention.
pub fn contention_rows(samples: usize, restarts: usize) -> Vec<Row> {
    let _burners = Burners::start();
    eprintln!("round trips under contention ...");
    let mut trips = round_trip(samples).into_iter();
    let (device, handle, ractor) = (trips.next().unwrap(), trips.next().unwrap(), trips.next().unwrap());
    let (latency_mode, _) = round_trip_latency_mode(samples);
    let (large, ractor_large, _) = large_round_trip(4096, samples);
    let (forwarded, _, _) = forwarded_round_trip(samples);
    let remote = remote::remote_round_trip(samples / 4);
    eprintln!("restarts under contention ...");
    let gpu_restart = restart_latency(true, false, restarts);
    let gpu_restart_latency = restart_latency(true, true, restarts);
    let host_restart = restart_latency(false, false, restarts);
    let (restart_device_part, restart_tree_part) = restart_breakdown(false, restarts);

    let within_2x = |_: &Summary, _: &Summary, r: f64| r <= 2.0;
    let context = |_: &Summary, _: &Summary, _: f64| true;
    let call_target = "<= 2x ractor's call, same contention";
    let row = |scenario: &str, ours: Summary, base: &Summary| {
        Row::new(&format!("under contention: {scenario}"), ours, base.clone(), call_target, within_2x)
    };
    let restart_target = "<= 2x ractor's child restart, same contention";
    vec![
        row("round trip", device, &ractor),
        row("round trip, supervised handle", handle, &ractor),
        row("round trip, latency mode", latency_mode, &ractor),
        row("round trip, 4 KiB", large.clone(), &ractor),
        Row::new("under contention: round trip, 4 KiB", large, ractor_large, "(context: a 4 KiB Vec)", context),
        row("call forwarded to another device", forwarded, &ractor),
        Row::new(
            "under contention: remote round trip over loopback",
            remote.gateway,
            remote.plain,
            "<= 2x ractor_cluster's remote call, same contention",
            within_2x,
        ),
        Row::new(
            "under contention: restart, one_for_one",
            gpu_restart,
            host_restart.clone(),
            restart_target,
            within_2x,
        ),
        Row::new(
            "under contention: restart, one_for_one, latency mode",
            gpu_restart_latency,
            host_restart,
            restart_target,
            within_2x,
        ),
        Row::new(
            "under contention: restart, one_for_one: where the time goes",
            restart_device_part,
            restart_tree_part,
            "(context: the device's part against the tree's)",
            context,
        ),
    ]
}
