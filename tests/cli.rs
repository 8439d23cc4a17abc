//! The `ringvisor` command, run as a process: `check` reports every error with its location and exits
//! non-zero; `demo` accounts for every reading; `run` and `chaos` start a declared tree; Ctrl-C stops a tree
//! in order.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

fn ringvisor() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ringvisor"));
    c.env_remove("RUST_LOG");
    c
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ringvisor-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().write_all(text.as_bytes()).unwrap();
    path
}

const BROKEN: &str = r#"
[supervisor]
strategy = "one_for_some"
intensity = 3

[[supervisor.children]]
id = "a"
gpu = "no-such-behaviour"

[[supervisor.children]]
id = "b"
gpu = "counter"
restart = "sometimes"
"#;

#[test]
fn check_reports_every_error_with_its_location_and_fails() {
    let path = temp_file("broken.toml", BROKEN);
    let out = ringvisor().arg("check").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a broken spec fails the check");
    assert!(stderr.contains("3 error(s)"), "{stderr}");
    assert!(stderr.contains("supervisor.strategy"), "{stderr}");
    assert!(stderr.contains("supervisor.children[0].gpu") && stderr.contains("no-such-behaviour"), "{stderr}");
    assert!(stderr.contains("supervisor.children[1].restart") && stderr.contains("sometimes"), "{stderr}");
    // each at the file, line and column of its key
    assert!(stderr.contains(&format!("{}:3:1: supervisor.strategy", path.display())), "{stderr}");
    // Malformed TOML: the file, line and column.
    let path = temp_file("malformed.toml", "[supervisor\nstrategy = 1\n");
    let out = ringvisor().arg("check").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:1:12: invalid TOML", path.display())), "{stderr}");
}

#[test]
fn check_on_an_unknown_behaviour_says_how_to_register_one_once_per_template() {
    let text = "[supervisor]\n[[supervisor.children]]\ncount = 50\nid = \"l{i}\"\ngpu = \"token_bucket\"\n";
    let path = temp_file("unknown.toml", text);
    let out = ringvisor().arg("check").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("1 error(s)"), "one error for the template, not one per child: {stderr}");
    assert!(stderr.contains(r#"supervisor.children[0][i=0].gpu: unknown behaviour "token_bucket""#), "{stderr}");
    assert!(stderr.contains("hint:") && stderr.contains("ringvisor::app::command::main"), "{stderr}");
}

#[test]
fn check_reports_a_tree_larger_than_the_devices_with_its_location() {
    let out = ringvisor().args(["check", "--slots", "4", "examples/fleet.toml"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("examples/fleet.toml:4:2: supervisor: the tree starts 5 GPU children; a device of 4 slots"),
        "{stderr}"
    );
    assert!(stderr.contains("--slots"), "names the setting: {stderr}");
}

#[test]
fn check_accepts_the_example_fleet() {
    let out = ringvisor().args(["check", "examples/fleet.toml"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ok") && stdout.contains("sensors"), "{stdout}");
    // a table, not Debug output
    assert!(stdout.contains("CHILD") && stdout.contains("rest_for_one") && !stdout.contains("Some("), "{stdout}");
}

#[test]
fn demo_accounts_for_every_reading_in_json() {
    let out = ringvisor().args(["demo", "--duration", "3", "--sensors", "64", "--json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}"))).collect();
    assert!(lines.iter().any(|l| l["type"] == "progress"), "progress records");
    let summary = lines.last().unwrap();
    if summary["restarts"].as_u64().unwrap() > 0 {
        let restarted = lines.iter().any(|l| l["type"] == "event" && l["event"] == "restarting");
        assert!(restarted, "each restart is a tree event on its own line");
    }
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["nothing_lost"], true, "{summary}");
    assert_eq!(summary["lost"], 0);
    let n = |k: &str| summary[k].as_u64().unwrap();
    assert!(n("readings") > 1000 && n("processed") > 0, "{summary}");
    assert!(n("planted") > 0, "anomalies were planted: {summary}");
    assert_eq!(
        n("planted"),
        n("detected") + n("missed_warmup") + n("missed_below") + n("planted_dead_lettered"),
        "every planted anomaly is accounted for"
    );
    assert!(n("detected") > 0, "{summary}");
    assert!(summary["faults"].as_object().is_some_and(|f| !f.is_empty()), "chaos ran: {summary}");
}

#[test]
fn demo_on_the_wgpu_backend_accounts_for_every_reading() {
    if !support::wgpu_or_skip() {
        return;
    }
    // A smaller fleet than on the CPU backend: lavapipe runs the device code on this machine's CPU too.
    let args = ["demo", "--backend", "wgpu", "--duration", "3", "--sensors", "16", "--rate", "50", "--json"];
    let out = ringvisor().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (summary["type"].as_str(), summary["nothing_lost"].as_bool()),
        (Some("summary"), Some(true)),
        "{summary}"
    );
    let n = |k: &str| summary[k].as_u64().unwrap();
    assert!(n("processed") > 0 && n("planted") > 0, "{summary}");
    assert_eq!(n("planted"), n("detected") + n("missed_warmup") + n("missed_below") + n("planted_dead_lettered"));
}

#[test]
fn run_starts_a_declared_tree_and_stops_it_in_order() {
    let out = ringvisor()
        .args(["run", "examples/fleet.toml", "--duration", "1", "--plain", "--slots", "16"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("children running"), "{stdout}");
    assert!(stdout.contains("stopped in order"), "{stdout}");
}

const TWO_DEVICES: &str = r#"
[supervisor]
strategy = "one_for_one"

[[supervisor.children]]
id = "a"
gpu = "counter"
device = 0

[[supervisor.children]]
id = "b"
gpu = "counter"
device = 1
"#;

#[test]
fn run_on_several_devices_places_children_by_their_spec() {
    let tree = temp_file("two_devices.toml", TWO_DEVICES);
    let out = ringvisor()
        .args(["--devices", "2", "run", tree.to_str().unwrap(), "--duration", "1", "--plain", "--slots", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("devices [Running, Running]"), "{stdout}");
    assert!(stdout.contains("stopped in order"), "{stdout}");
    // One device: the child pinned to device 1 is an error with its location.
    let out = ringvisor().args(["run", tree.to_str().unwrap(), "--duration", "1", "--plain"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("supervisor.children[1].device: device 1 does not exist"), "{stderr}");
}

#[test]
fn chaos_runs_a_declared_tree_under_faults_and_prints_the_summary() {
    let args =
        ["chaos", "examples/fleet.toml", "--seed", "3", "--rate", "20", "--duration", "2", "--plain", "--slots", "32"];
    let out = ringvisor().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("chaos summary (seed 3)") && stdout.contains("| faults: "), "{stdout}");
    assert!(stdout.contains("every child running again"), "{stdout}");
}

#[test]
fn ctrl_c_stops_the_tree_in_order_and_prints_the_summary() {
    let mut child = ringvisor()
        .args(["run", "examples/fleet.toml", "--plain", "--slots", "16"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the tree to be up (its first progress line), then Ctrl-C.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        stdout += &line;
        stdout.push('\n');
        if line.contains("children running") {
            break;
        }
    }
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "did not stop after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    }
    for line in lines {
        stdout += &line.unwrap();
        stdout.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{stdout}");
    assert!(stdout.contains("interrupted: stopping the tree in order"), "{stdout}");
    assert!(stdout.contains("restarts 0") && stdout.contains("stopped in order"), "{stdout}");
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    let out = ringvisor().args(["demo", "--duration", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--duration"));
    let out = ringvisor().args(["demo", "--backend", "tpu"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown backend `tpu`"));
    let out = ringvisor().args(["run", "/no/such/tree.toml"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/tree.toml"));
}
