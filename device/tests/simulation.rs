//! The deterministic simulator (`ringvisor_device::sim`, docs/faults.md) in CI: today's protocol over as many seeds
//! as fit in the time given (`RINGVISOR_SIM_SECS`, 60 s by default; at least `MIN_SEEDS`), the three ordering
//! defects a GPU found and the three the simulator found each found from a cold start within `DEFECT_BOUND` seeds
//! when put back, the runs that found the latter kept as regression tests, a seed replayed exactly, and a failing
//! run shortened. `RINGVISOR_SIM_SEED=N` (with `RINGVISOR_SIM_OPERATIONS`, `RINGVISOR_SIM_DEFECTS` as
//! `reply,faults,beats,device-faults,one-shot,error-reply`) replays one run through the `replay` test.

use ringvisor_device::sim::{minimise, run, Defect, SimConfig};
use std::time::{Duration, Instant};

/// Seeds every CI run tries, however little time it is given.
const MIN_SEEDS: u64 = 64;
/// Each defect is found within this many seeds from seed 1 (docs/faults.md gives the first seed of each).
const DEFECT_BOUND: u64 = 500;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn todays_protocol_keeps_every_promise_over_many_seeds() {
    let budget = Duration::from_secs(env_u64("RINGVISOR_SIM_SECS").unwrap_or(60));
    let first = env_u64("RINGVISOR_SIM_FIRST_SEED").unwrap_or(1);
    let started = Instant::now();
    let mut seed = first;
    let (mut calls, mut crashes, mut handed_back, mut lost, mut dead) = (0, 0, 0, 0, 0);
    while seed < first + MIN_SEEDS || started.elapsed() < budget {
        match run(&SimConfig::seed(seed)) {
            Ok(r) => {
                calls += r.calls;
                crashes += r.crashes;
                handed_back += r.handed_back;
                lost += u64::from(r.lost);
                dead += r.dead;
            }
            Err(f) => {
                let short = minimise(&SimConfig::seed(seed)).unwrap_or(f);
                panic!("the simulator found a defect:\n{short}");
            }
        }
        seed += 1;
    }
    println!(
        "seeds {first}..{seed}: {calls} calls, {crashes} crashes, {handed_back} handed back, {lost} devices lost \
         ({dead} calls dead with them), in {:?}",
        started.elapsed()
    );
    // the runs exercised what the promises are about
    let runs = seed - first;
    assert!(
        calls > 1000 * runs / MIN_SEEDS && crashes > 0 && handed_back > 0 && lost > 0,
        "{calls} {crashes} {handed_back} {lost}"
    );
}

/// The first seed (from 1) with which the simulator finds `defect`, and what it reported.
fn first_finding(defect: Defect) -> Option<(u64, String)> {
    (1..=env_u64("RINGVISOR_SIM_DEFECT_BOUND").unwrap_or(DEFECT_BOUND))
        .find_map(|seed| run(&SimConfig::seed(seed).with_defect(defect)).err().map(|f| (seed, f.violation)))
}

/// Asserts the simulator finds `defect` within the bound, with a report naming one of `signs`.
fn assert_found(defect: Defect, signs: &[&str]) {
    let (seed, what) = first_finding(defect).expect("found within the bound");
    println!("{defect:?} found with seed {seed}: {what}");
    assert!(signs.iter().any(|s| what.contains(s)), "{what}");
}

#[test]
fn a_reply_published_before_its_message_was_consumed_is_found() {
    assert_found(Defect::ReplyBeforeConsumed, &["not yet consumed"]);
}

#[test]
fn fault_bits_read_before_the_inbox_tail_are_found() {
    assert_found(
        Defect::FaultsBeforeTail,
        &["sent into a stall", "crash meant for it was missed", "answered normally by it before any message"],
    );
}

#[test]
fn block_0_starving_its_heartbeat_under_a_burst_is_found() {
    assert_found(Defect::KeeperBeatsOnceAStep, &["heartbeat stood still"]);
}

#[test]
fn the_device_fault_word_read_before_the_inbox_tail_is_found() {
    assert_found(Defect::DeviceFaultsBeforeTail, &["stall of the device"]);
}

#[test]
fn a_one_shot_faults_kind_taken_from_the_steps_copy_is_found() {
    assert_found(Defect::OneShotKindFromStep, &["not explained", "no fault explains"]);
}

#[test]
fn an_error_reply_published_before_its_message_was_consumed_is_found() {
    assert_found(Defect::ErrorReplyBeforeConsumed, &["(kind 5)"]);
}

/// For each defect the simulator found in the protocol as it was, the seed with which this simulator finds it
/// first when it is put back (the regression test of its fix: the same seed keeps every promise with the fix).
const FINDINGS: &[(Defect, u64)] =
    &[(Defect::DeviceFaultsBeforeTail, 95), (Defect::OneShotKindFromStep, 10), (Defect::ErrorReplyBeforeConsumed, 60)];

#[test]
fn the_seeds_that_found_defects_pass_with_their_fixes() {
    for &(defect, seed) in FINDINGS {
        let found = run(&SimConfig::seed(seed).with_defect(defect));
        assert!(found.is_err(), "seed {seed} no longer finds {defect:?}: update FINDINGS and docs/faults.md");
        if let Err(f) = run(&SimConfig::seed(seed)) {
            panic!("{defect:?} is back:\n{f}");
        }
    }
}

#[test]
#[ignore = "a measurement for docs/faults.md: RINGVISOR_SIM_RATE_SEEDS seeds (300) per defect"]
fn how_often_each_defect_is_found() {
    let seeds = env_u64("RINGVISOR_SIM_RATE_SEEDS").unwrap_or(300);
    for defect in Defect::ALL {
        let found: Vec<u64> = (1..=seeds).filter(|&s| run(&SimConfig::seed(s).with_defect(defect)).is_err()).collect();
        println!("{defect:?}: found by {} of {seeds} seeds, first {:?}", found.len(), found.first());
    }
}

#[test]
fn a_seed_replays_exactly() {
    let mut lost = 0;
    for seed in 1..=24 {
        let once = run(&SimConfig::seed(seed)).expect("keeps every promise");
        let again = run(&SimConfig::seed(seed)).expect("keeps every promise");
        assert_eq!(format!("{once:?}"), format!("{again:?}"));
        assert!(once.points > 1000, "{once:?}");
        lost += u64::from(once.lost);
    }
    assert!(lost > 0, "a run that loses its device replays too");
    let (seed, _) = first_finding(Defect::ReplyBeforeConsumed).expect("found within the bound");
    let failing = SimConfig::seed(seed).with_defect(Defect::ReplyBeforeConsumed);
    let (a, b) = (run(&failing).expect_err("it finds it"), run(&failing).expect_err("again"));
    assert_eq!((&a.violation, &a.recent), (&b.violation, &b.recent));
}

#[test]
fn a_failing_run_is_shortened_to_the_operations_it_needs() {
    let (seed, _) = first_finding(Defect::ReplyBeforeConsumed).expect("found within the bound");
    let config = SimConfig::seed(seed).with_defect(Defect::ReplyBeforeConsumed);
    let whole = run(&config).expect_err("it finds it");
    let short = minimise(&config).expect("it fails");
    assert!(short.operations < whole.operations, "{} -> {}", whole.operations, short.operations);
    assert!(run(&config.clone().operations(short.operations)).is_err(), "the shortened run fails too");
    if short.operations > 0 {
        assert!(run(&config.operations(short.operations - 1)).is_ok(), "one operation fewer passes");
    }
    assert!(short.to_string().contains(&format!("RINGVISOR_SIM_OPERATIONS={}", short.operations)), "{short}");
}

#[test]
fn replay() {
    let seed = env_u64("RINGVISOR_SIM_SEED").unwrap_or(1);
    let mut config = SimConfig::seed(seed);
    config.operations = env_u64("RINGVISOR_SIM_OPERATIONS").map(|n| n as u32);
    for name in std::env::var("RINGVISOR_SIM_DEFECTS").unwrap_or_default().split(',').filter(|n| !n.is_empty()) {
        let defect = match name {
            "reply" => Defect::ReplyBeforeConsumed,
            "faults" => Defect::FaultsBeforeTail,
            "beats" => Defect::KeeperBeatsOnceAStep,
            "device-faults" => Defect::DeviceFaultsBeforeTail,
            "one-shot" => Defect::OneShotKindFromStep,
            "error-reply" => Defect::ErrorReplyBeforeConsumed,
            other => {
                panic!("RINGVISOR_SIM_DEFECTS: {other}? (reply, faults, beats, device-faults, one-shot, error-reply)")
            }
        };
        config = config.with_defect(defect);
    }
    match run(&config) {
        Ok(report) => println!("{report:?}"),
        Err(f) => panic!("{f}"),
    }
}
