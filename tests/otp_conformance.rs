//! OTP conformance: each scenario in `tests/otp/` runs on ringvisor's supervisor, with GPU children on the
//! CPU backend (plain, and mirrored by ractor actors), with GPU children on the WebGPU backend (lavapipe in CI),
//! and with host children, and must
//! print the trace Erlang/OTP 25's own supervisor printed for it (checked in beside it; regenerate with `tests/otp/regenerate.sh`).

mod support;

use support::otp::{normalise, parse, run, Mode};
use support::wgpu_or_skip;

async fn conforms(name: &str, mode: Mode) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otp");
    let scenario = std::fs::read_to_string(format!("{dir}/{name}.scn")).expect("scenario");
    let expected = std::fs::read_to_string(format!("{dir}/{name}.trace")).expect("trace");
    let expected: Vec<String> = expected.lines().map(str::to_string).collect();
    let actual = run(&parse(&scenario), mode).await;
    let (expected, actual) = (normalise(&expected), normalise(&actual));
    if expected != actual {
        let mut report = String::new();
        for i in 0..expected.len().max(actual.len()) {
            let e = expected.get(i).map_or("", String::as_str);
            let a = actual.get(i).map_or("", String::as_str);
            report.push_str(&format!("{} {e:<50} | {a}\n", if e == a { ' ' } else { '!' }));
        }
        panic!("{name} ({mode:?}) differs from OTP (left: OTP, right: ringvisor):\n{report}");
    }
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod host {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { conforms(stringify!($name), Mode::Host).await; })*
        }
        mod gpu {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { conforms(stringify!($name), Mode::Gpu).await; })*
        }
        mod mirrored {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { conforms(stringify!($name), Mode::Mirrored).await; })*
        }
        mod wgpu {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                if wgpu_or_skip() {
                    conforms(stringify!($name), Mode::Wgpu).await;
                }
            })*
        }
    };
}

scenarios!(
    one_for_one,
    one_for_all,
    rest_for_one,
    escalation_one_for_one,
    escalation_one_for_all,
    escalation_to_top,
    other_fails_one_for_all,
    other_fails_rest_for_one,
    restart_matrix,
    temporary_bystander,
    start_stop_order,
    shutdown_kinds,
    spaced_restarts,
    nested_tree,
    admin_errors,
    restart_loop,
    significant_any,
    significant_all,
    count_2000,
    unpaced_storm,
);
