//! `ringvisor`: the command-line entry point.
//!
//! `ringvisor demo [--duration SECS] [--actors N]` runs the main job on the CPU backend: supervised counter
//! actors on a running device (a `simple_one_for_one` pool under a root supervisor), producers calling them
//! through stable handles, a crash injected into a random actor every 100 ms and restarted by its supervisor,
//! then a summary that accounts for every message: answered, or a dead letter with its reason.

use ringvisor::prelude::*;
use ringvisor::supervisor::{DeadLetterReason, SendError, TreeEvent};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

struct Args {
    duration: Duration,
    actors: u32,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args { duration: Duration::from_secs(10), actors: 256 };
    match it.next().as_deref() {
        Some("demo") => {}
        Some(other) => return Err(format!("unknown command `{other}`")),
        None => return Err("missing command".into()),
    }
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--duration" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--duration: {e}"))?;
                if !(secs > 0.0 && secs < 86_400.0) {
                    return Err("--duration must be between 0 and 86400 seconds".into());
                }
                args.duration = Duration::from_secs_f64(secs);
            }
            "--actors" => {
                args.actors = value()?.parse().map_err(|e| format!("--actors: {e}"))?;
                if args.actors < 2 {
                    return Err("--actors must be at least 2".into());
                }
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\nusage: ringvisor demo [--duration SECS] [--actors N]");
            std::process::exit(2);
        }
    };
    if let Err(e) = demo(args).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// What the producers saw.
#[derive(Default)]
struct Tally {
    handed: AtomicU64,
    answered: AtomicU64,
    undelivered: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

async fn demo(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let pool = SupervisorSpec::simple(ChildSpec::gpu("counter", GpuChild::new("counter")).name("demo/counters/{id}"))
        .intensity(10_000, Duration::from_secs(1));
    let spec = SupervisorSpec::new(Strategy::OneForOne).child(ChildSpec::supervisor("counters", pool));
    let config = DeviceConfig::default().slots(args.actors);
    let rt = Runtime::builder().device(config).root_id("demo").start(spec).await?;
    println!("ringvisor demo: {} supervised counter actors on {}", args.actors, rt.device().describe());
    let pool = ringvisor::supervisor::SupervisorRef::from_child(&rt.root().child("counters").await?)
        .ok_or("the pool supervisor is not running")?;
    for _ in 0..args.actors {
        pool.start_dynamic(Vec::new()).await?;
    }
    let actors: Vec<GpuActorRef> =
        rt.find("demo/counters/*")?.into_iter().filter_map(|(_, child)| child.gpu()).collect();
    let mut tree_events = rt.services().events().subscribe();
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let producers: Vec<_> = (0..32u32)
        .map(|p| {
            let (actors, stop, tally) = (actors.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let mut i = p;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    let actor = &actors[(i >> 8) as usize % actors.len()];
                    tally.handed.fetch_add(1, Ordering::Relaxed);
                    let counter = match actor.call(&1i64.to_le_bytes(), Duration::from_secs(5)).await {
                        Ok(_) => &tally.answered,
                        Err(SendError::Device(ringvisor::device::DeviceError::Undelivered { .. })) => {
                            &tally.undelivered
                        }
                        Err(SendError::InboxFull) => &tally.refused,
                        Err(_) => &tally.timed_out,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut crashes = 0u64;
    let mut seed = 0x9E37_79B9u32;
    while started.elapsed() < args.duration {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        rt.device().inject(actors[seed as usize % actors.len()].slot(), Fault::CrashNextMessage)?;
        crashes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut restarts = 0u64;
    while let Ok(e) = tree_events.try_recv() {
        restarts += u64::from(matches!(e, TreeEvent::Restarting { .. }));
    }
    let dl = rt.dead_letters().stats();
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let handed = load(&tally.handed);
    let dead = dl.count(DeadLetterReason::LeftInInbox)
        + dl.count(DeadLetterReason::Poison)
        + dl.count(DeadLetterReason::InboxFull);
    println!("ran {elapsed:.1} s");
    println!("messages handed to handles {:>10}  ({:.0}/s)", handed, handed as f64 / elapsed);
    println!("answered                   {:>10}", load(&tally.answered));
    println!(
        "dead letters               {:>10}  ({} poison, {} left in inbox at restart, {} inbox full)",
        dead,
        dl.count(DeadLetterReason::Poison),
        dl.count(DeadLetterReason::LeftInInbox),
        dl.count(DeadLetterReason::InboxFull)
    );
    println!("crashes injected           {:>10}", crashes);
    println!("restarts by the supervisor {:>10}", restarts);
    let unaccounted = handed as i64 - load(&tally.answered) as i64 - dead as i64;
    println!("unaccounted                {:>10}", unaccounted);
    let timed_out = load(&tally.timed_out);
    rt.shutdown().await;
    if unaccounted != 0 || timed_out != 0 || load(&tally.undelivered) + load(&tally.refused) != dead {
        return Err(format!("{unaccounted} messages unaccounted for, {timed_out} calls timed out").into());
    }
    println!("every message was answered or is a dead letter with its reason: nothing lost");
    Ok(())
}
