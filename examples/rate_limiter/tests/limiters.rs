//! The test a rate-limiter service writes for its own tree: 50 limiters from the TOML template, found by
//! glob, answering typed messages; one crashed on purpose is restarted from fresh state, and the message it
//! crashed on is a dead letter with the reason.

use std::path::Path;
use std::process::Command;

use ringvisor::prelude::*;
use ringvisor_example_rate_limiter::{behaviours, Layout, Reply, Request};

const T: Duration = Duration::from_secs(10);

fn tree() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/limiters.toml"))
}

async fn start() -> Runtime {
    let config = DeviceConfig::default().slots(64).behaviours(behaviours().expect("token_bucket registers"));
    Runtime::builder().device(config).start_toml(tree(), SpecLoader::new()).await.expect("the tree starts")
}

/// The build script reports the C structs as the C compiler laid them out (`c_struct` in build.rs); each Rust
/// mirror must match it field by field.
#[test]
fn the_c_message_structs_and_the_rust_ones_agree_at_build_time() {
    use ringvisor::device::rust_layout;
    use ringvisor_example_rate_limiter::{c_layouts, Init};
    let rust = [
        rust_layout!(Init, [client, capacity, refill_per_sec]),
        rust_layout!(Request, [op, cost]),
        rust_layout!(Reply, [client, granted, tokens_left, reserved, granted_total, denied_total]),
    ];
    let c = c_layouts();
    assert_eq!(c.len(), rust.len());
    for (c, rust) in c.iter().zip(&rust) {
        c.check(rust).unwrap();
    }
    // a drift is named: the C reply against a Rust struct with one field fewer
    let short = rust_layout!(Reply, [client, granted, tokens_left, granted_total, denied_total]);
    let err = c[2].check(&short).unwrap_err();
    assert!(err.contains("field `reserved` of tb_reply is not in Reply"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_structs_and_the_rust_ones_agree() {
    let rt = start().await;
    let limiter = rt.gpu("limiter/client-0").expect("registered");
    let c: Layout = limiter.call_typed(&Request { op: Request::LAYOUT, cost: 0 }, T).await.unwrap();
    assert_eq!(c, Layout::of_rust(), "tb_* in kernels/token_bucket.cu against src/lib.rs");
    // the state size the build script declared (`.state("tb_state")`) is the C compiler's sizeof
    let set = behaviours().unwrap();
    assert_eq!(set.state_bytes(set.id("token_bucket").unwrap()), 48);
    // a state read takes the declared 48 bytes, which fit one envelope on this default device (no bulk areas),
    // not the 1 KiB region: granted_total (offset 16) and client (offset 32) as the behaviour keeps them
    limiter.call_typed::<Request, Reply>(&Request::take(2), T).await.unwrap();
    let state = limiter.state(T).await.unwrap();
    assert_eq!(state.len(), 48);
    assert_eq!(u64::from_le_bytes(state[16..24].try_into().unwrap()), 1, "one call granted");
    let reply: Reply = limiter.call_typed(&Request::take(0), T).await.unwrap();
    assert_eq!(u32::from_le_bytes(state[32..36].try_into().unwrap()), reply.client);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_limiters_from_one_template_found_by_glob() {
    let rt = start().await;
    assert_eq!(rt.find("limiter/**").unwrap().len(), 50);
    let ones = rt.find("limiter/client-1*").unwrap();
    let names: Vec<&str> = ones.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 11, "client-1 and client-10 to client-19: {names:?}");
    assert_eq!(rt.find("limiter/client-[0-4]").unwrap().len(), 5);
    // Each one was started with its own index as its client (`{ u32 = "{i}" }` in the template).
    for (name, child) in ones {
        let reply: Reply = child.gpu().unwrap().call_typed(&Request::take(1), T).await.unwrap();
        assert_eq!(format!("limiter/client-{}", reply.client), name);
        assert_eq!((reply.granted, reply.granted_total), (1, 1));
    }
    // More than the capacity (100) is never granted, whatever the time.
    let limiter = rt.gpu("limiter/client-3").unwrap();
    let reply: Reply = limiter.call_typed(&Request::take(101), T).await.unwrap();
    assert_eq!((reply.granted, reply.denied_total), (0, 1));
    // A message of the wrong size is answered with an error, and the limiter keeps running.
    let err = limiter.call(&[1, 2, 3], T).await.unwrap_err();
    assert!(err.to_string().contains("BadEnvelope") || err.to_string().contains("bad envelope"), "{err}");
    let reply: Reply = limiter.call_typed(&Request::take(1), T).await.unwrap();
    assert_eq!(reply.granted_total, 1, "same incarnation: its counts went on");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_limiter_restarts_from_fresh_state_and_its_message_is_a_dead_letter() {
    let rt = start().await;
    let mut events = rt.services().events().subscribe();
    let limiter = rt.gpu("limiter/client-7").unwrap();
    for _ in 0..3 {
        let _: Reply = limiter.call_typed(&Request::take(1), T).await.unwrap();
    }
    assert_eq!(rt.faults().inject("limiter/client-7", InjectedFault::CrashNextMessage).unwrap(), 1);
    let err = limiter.call_typed::<_, Reply>(&Request::take(1), T).await.unwrap_err();
    // The error names the actor and uses the dead-letter queue's word for what happened.
    match &err {
        SendError::Undelivered { actor, reason, generation, .. } => {
            assert_eq!((actor.as_str(), *reason, *generation), ("limiter/client-7", DeadLetterReason::Poison, 1))
        }
        other => panic!("the crashing message: {other}"),
    }
    assert!(err.to_string().starts_with("message to `limiter/client-7` (slot "), "{err}");
    // Only limiter-7 restarts (one_for_one).
    let restarted = loop {
        match tokio::time::timeout(T, events.recv()).await.expect("a restart").unwrap() {
            TreeEvent::ChildStarted { child, .. } => break child,
            _ => continue,
        }
    };
    assert_eq!(restarted, "limiter-7");
    let letters = rt.dead_letters().snapshot();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].reason, DeadLetterReason::Poison);
    assert_eq!(letters[0].target.as_deref(), Some("limiter/client-7"));
    // the incarnation it crashed and the device's code, as data
    assert_eq!((letters[0].generation, letters[0].code), (Some(1), Some(DeviceCode::Injected)));
    // The same handle reaches the new incarnation: a full bucket and fresh counts.
    let reply: Reply = limiter.call_typed(&Request::take(1), T).await.unwrap();
    assert_eq!((reply.client, reply.granted, reply.granted_total), (7, 1, 1));
    let other: Reply = rt.gpu("limiter/client-8").unwrap().call_typed(&Request::take(1), T).await.unwrap();
    assert_eq!(other.granted_total, 1, "a neighbour was not touched");
    rt.shutdown().await;
}

#[test]
fn the_example_command_knows_the_behaviour() {
    let out = Command::new(env!("CARGO_BIN_EXE_rate-limiter")).arg("check").arg(tree()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ok") && stdout.contains("limiter-49"), "{stdout}");
}

/// The program's own command runs its trees; the built-in demo is the `ringvisor` command's, not offered here.
#[test]
fn the_example_command_has_no_builtin_demo() {
    let help = Command::new(env!("CARGO_BIN_EXE_rate-limiter")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("check") && help.contains("run"), "{help}");
    assert!(!help.contains("demo"), "{help}");
    let out = Command::new(env!("CARGO_BIN_EXE_rate-limiter")).arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`demo` is the ringvisor command's built-in job"), "{stderr}");
}
