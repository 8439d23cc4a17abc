//! Runs an OTP oracle scenario (`tests/otp/*.scn`) on ringvisor's supervisor and prints the trace in the
//! oracle's format, for comparison with the trace Erlang/OTP's own supervisor printed (`*.trace`).
//!
//! Mapping: every `child` is a GPU actor (behaviour `test`) in [`Mode::Gpu`] (mirrored by a ractor actor in
//! [`Mode::Mirrored`]), a host ractor actor in
//! [`Mode::Host`]. Crashes of a GPU child are real device events: `abnormal` is a failing message, `normal`
//! a drain, `kill` a device kill; `shutdown` and `shutdown_tag` are `GpuActorRef::exit` with that reason. A
//! `hang_on_shutdown` child is always a host actor (a GPU actor cannot ignore a drain; hung GPU actors are
//! the watchdog's business). `fail_starts` / `fail_from` count start attempts per child id across the run,
//! as the oracle does; for a GPU child a failing attempt is a device init failure.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringvisor::device::{Backend, BehaviourSet, Device, DeviceConfig, WgpuConfig};
use ringvisor::supervisor::ractor::{Actor, ActorProcessingErr, ActorRef};
use ringvisor::supervisor::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Host,
    /// GPU children on the backend `RINGVISOR_BACKEND` names (the CPU backend when unset).
    Gpu,
    /// GPU children on the WebGPU backend (needs a Vulkan adapter: the caller checks).
    Wgpu,
    /// GPU children as in `Gpu`, each mirrored by a ractor actor (`GpuChild::mirrored`).
    Mirrored,
}

#[derive(Debug)]
struct Node {
    is_sup: bool,
    id: String,
    kv: HashMap<String, String>,
    children: Vec<Node>,
}

fn kv(words: &[&str]) -> HashMap<String, String> {
    words.iter().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn parse_tree(lines: &[&str], pos: &mut usize) -> Node {
    let line = lines[*pos];
    let my_indent = indent(line);
    let words: Vec<&str> = line.split_whitespace().collect();
    let kvs = kv(&words[1..]);
    let mut node = Node { is_sup: words[0] == "sup", id: kvs["id"].clone(), kv: kvs, children: Vec::new() };
    *pos += 1;
    if node.is_sup {
        while *pos < lines.len() && indent(lines[*pos]) > my_indent {
            node.children.push(parse_tree(lines, pos));
        }
    }
    node
}

/// A scenario: the tree and the action lines.
pub struct Scenario {
    tree: Node,
    actions: Vec<Vec<String>>,
}

pub fn parse(text: &str) -> Scenario {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !l.trim().starts_with('#')).collect();
    let tree_len =
        lines.iter().take_while(|l| matches!(l.split_whitespace().next(), Some("sup") | Some("child"))).count();
    let mut pos = 0;
    let tree = parse_tree(&lines[..tree_len], &mut pos);
    let actions = lines[tree_len..].iter().map(|l| l.split_whitespace().map(str::to_string).collect()).collect();
    Scenario { tree, actions }
}

/// Start attempts per child id, across the run (the oracle's `{starts, Id}` counter).
type Starts = Arc<Mutex<HashMap<String, u32>>>;

fn next_attempt(starts: &Starts, id: &str) -> u32 {
    let mut s = starts.lock().unwrap();
    let n = s.entry(id.to_string()).or_insert(0);
    *n += 1;
    *n
}

/// How a start attempt of a child ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attempt {
    Starts,
    /// Listed in `fail_starts`: one of finitely many failures.
    Fails,
    /// At or past `fail_from`: one turn of a restart loop that only an admin call ends.
    FailsForever,
}

/// A restart loop's failed attempt takes at least this long. OTP's own loop made 161 attempts during
/// `admin_errors`; unpaced, a release build makes hundreds of thousands a second and reaches the scenario's
/// intensity (1,000,000 in 5 s) before the admin calls finish. Paced, the loop cannot exceed 1,000 attempts a
/// second however fast the machine runs it, so the trace (runs of `start_fail` lines collapse in `normalise`)
/// no longer depends on the build profile.
const LOOP_ATTEMPT_FLOOR: Duration = Duration::from_millis(1);

fn attempt(kv: &HashMap<String, String>, n: u32) -> Attempt {
    let listed = kv.get("fail_starts").is_some_and(|l| l.split(',').any(|x| x.parse::<u32>().ok() == Some(n)));
    let from = kv.get("fail_from").and_then(|f| f.parse::<u32>().ok()).is_some_and(|f| n >= f);
    match (listed, from) {
        (_, true) => Attempt::FailsForever,
        (true, false) => Attempt::Fails,
        (false, false) => Attempt::Starts,
    }
}

/// The host worker: exits with the reason it is told to; optionally ignores graceful shutdown.
pub struct TestWorker;

pub enum WorkerMsg {
    Exit(ExitReason),
}

// Under the `cluster` feature (ractor's `cluster`), each message type says it is one.
#[cfg(feature = "cluster")]
impl ractor::Message for WorkerMsg {}

impl Actor for TestWorker {
    type Msg = WorkerMsg;
    type State = bool;
    type Arguments = bool;

    async fn pre_start(&self, _: ActorRef<WorkerMsg>, hang: bool) -> Result<bool, ActorProcessingErr> {
        Ok(hang)
    }

    async fn handle(&self, me: ActorRef<WorkerMsg>, msg: WorkerMsg, _: &mut bool) -> Result<(), ActorProcessingErr> {
        let WorkerMsg::Exit(reason) = msg;
        match reason {
            ExitReason::Abnormal(why) => Err(why.into()),
            other => {
                me.stop(Some(other.to_stop_reason()));
                Ok(())
            }
        }
    }

    async fn post_stop(&self, _: ActorRef<WorkerMsg>, hang: &mut bool) -> Result<(), ActorProcessingErr> {
        if *hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok(())
    }
}

const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;
/// A `test` behaviour message that fails the actor (op 2, code 0: RV_ERR_USER_BASE).
fn fail_msg() -> Vec<u8> {
    let mut fail = 2u32.to_le_bytes().to_vec();
    fail.extend_from_slice(&0u32.to_le_bytes());
    fail
}

/// An init failure code for the `test` behaviour (any positive code fails the init).
const INIT_FAILS: u32 = 1001;

fn restart_of(kv: &HashMap<String, String>) -> Restart {
    match kv.get("restart").map(String::as_str) {
        Some("transient") => Restart::Transient,
        Some("temporary") => Restart::Temporary,
        _ => Restart::Permanent,
    }
}

fn shutdown_of(kv: &HashMap<String, String>, default: Shutdown) -> Shutdown {
    match kv.get("shutdown").map(String::as_str) {
        None => default,
        Some("brutal_kill") => Shutdown::BrutalKill,
        Some("infinity") => Shutdown::Infinity,
        Some(ms) => Shutdown::Timeout(Duration::from_millis(ms.parse().unwrap())),
    }
}

fn child_spec(id: &str, kvs: &HashMap<String, String>, mode: Mode, starts: &Starts) -> ChildSpec {
    let hang = kvs.get("hang_on_shutdown").is_some_and(|v| v == "true");
    let spec = if mode != Mode::Host && !hang {
        let (starts, kvs2, id2) = (starts.clone(), kvs.clone(), id.to_string());
        let gpu = GpuChild::new("test").init_with(move |_| {
            let mut init = POISON.to_le_bytes().to_vec();
            let outcome = attempt(&kvs2, next_attempt(&starts, &id2));
            if outcome == Attempt::FailsForever {
                // init bytes are computed on the supervisor's task: pacing here paces the loop
                std::thread::sleep(LOOP_ATTEMPT_FLOOR);
            }
            if outcome != Attempt::Starts {
                init.extend_from_slice(&INIT_FAILS.to_le_bytes());
            }
            init
        });
        ChildSpec::gpu(id, gpu.mirrored(mode == Mode::Mirrored))
    } else {
        let (starts, kvs2, id2) = (starts.clone(), kvs.clone(), id.to_string());
        ChildSpec::actor(id, move |ctx: StartContext| {
            let outcome = attempt(&kvs2, next_attempt(&starts, &id2));
            async move {
                if outcome == Attempt::FailsForever {
                    tokio::time::sleep(LOOP_ATTEMPT_FLOOR).await;
                }
                if outcome != Attempt::Starts {
                    return Err("start_failed".to_string());
                }
                ctx.spawn_linked(TestWorker, hang).await
            }
        })
    };
    spec.restart(restart_of(kvs))
        .shutdown(shutdown_of(kvs, Shutdown::Timeout(Duration::from_millis(5000))))
        .significant(kvs.get("significant").is_some_and(|v| v == "true"))
}

fn sup_spec(node: &Node, mode: Mode, starts: &Starts) -> SupervisorSpec {
    let strategy = match node.kv.get("strategy").map(String::as_str) {
        Some("one_for_all") => Strategy::OneForAll,
        Some("rest_for_one") => Strategy::RestForOne,
        _ => Strategy::OneForOne,
    };
    let intensity = node.kv.get("intensity").map_or(1, |v| v.parse().unwrap());
    let period = node.kv.get("period").map_or(5, |v| v.parse().unwrap());
    let auto = match node.kv.get("auto_shutdown").map(String::as_str) {
        Some("any_significant") => AutoShutdown::AnySignificant,
        Some("all_significant") => AutoShutdown::AllSignificant,
        _ => AutoShutdown::Never,
    };
    let mut spec = SupervisorSpec::new(strategy).intensity(intensity, Duration::from_secs(period)).auto_shutdown(auto);
    for c in &node.children {
        spec = spec.child(if c.is_sup {
            ChildSpec::supervisor(&c.id, sup_spec(c, mode, starts))
                .restart(restart_of(&c.kv))
                .shutdown(shutdown_of(&c.kv, Shutdown::Infinity))
                .significant(c.kv.get("significant").is_some_and(|v| v == "true"))
        } else {
            child_spec(&c.id, &c.kv, mode, starts)
        });
    }
    spec
}

fn count_workers(node: &Node) -> u32 {
    node.children.iter().map(|c| if c.is_sup { count_workers(c) } else { 1 }).sum()
}

/// Formats one tree event as an oracle trace line (events the oracle does not print give `None`).
pub fn trace_line(event: &TreeEvent) -> Option<String> {
    match event {
        TreeEvent::SupervisorStarted { supervisor } => Some(format!("start {supervisor}")),
        TreeEvent::ChildStarted { child, child_type: ChildType::Worker, .. } => Some(format!("start {child}")),
        TreeEvent::ChildStartFailed { child, child_type: ChildType::Worker, .. } => Some(format!("start_fail {child}")),
        TreeEvent::ChildExited { child, reason, .. } => Some(format!("stop {child} {}", reason.label())),
        TreeEvent::SupervisorStopped { supervisor, reason, root: true } => {
            Some(format!("stop {supervisor} {}", reason.label()))
        }
        _ => None,
    }
}

fn result_word<T>(r: &Result<T, SupervisorError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(SupervisorError::AlreadyStarted(_)) => "error:already_started",
        Err(SupervisorError::AlreadyPresent(_)) => "error:already_present",
        Err(SupervisorError::Running(_)) => "error:running",
        Err(SupervisorError::Restarting(_)) => "error:restarting",
        Err(SupervisorError::NotFound(_)) => "error:not_found",
        Err(SupervisorError::NoProc) => "error:noproc",
        Err(_) => "error:other",
    }
}

struct Run {
    mode: Mode,
    services: Services,
    device: Option<Device>,
    root_id: String,
    root: Option<SupervisorRef>,
    events: tokio::sync::mpsc::UnboundedReceiver<TreeEvent>,
    trace: Vec<String>,
    starts: Starts,
}

impl Run {
    fn drain_events(&mut self) -> usize {
        let mut n = 0;
        while let Ok(e) = self.events.try_recv() {
            n += 1;
            if let Some(line) = trace_line(&e) {
                self.trace.push(line);
            }
        }
        n
    }

    async fn supervisors(&self) -> Vec<(String, SupervisorRef)> {
        let mut out = Vec::new();
        let Some(root) = self.root.clone() else { return out };
        let mut queue = vec![(self.root_id.clone(), root)];
        while let Some((id, sup)) = queue.pop() {
            if let Ok(children) = sup.which_children().await {
                for c in children {
                    if c.child_type == ChildType::Supervisor {
                        if let Some(s) = SupervisorRef::from_child(&c.child) {
                            queue.push((c.id.clone(), s));
                        }
                    }
                }
                out.push((id, sup));
            }
        }
        out
    }

    async fn supervisor(&self, id: &str) -> Option<SupervisorRef> {
        self.supervisors().await.into_iter().find(|(i, _)| i == id).map(|(_, s)| s)
    }

    async fn child(&self, id: &str) -> Option<ChildRef> {
        for (_, sup) in self.supervisors().await {
            if let Ok(children) = sup.which_children().await {
                if let Some(c) = children.into_iter().find(|c| c.id == id && c.state == RunState::Running) {
                    return Some(c.child);
                }
            }
        }
        None
    }

    /// Waits until the tree is quiet: every supervisor has handled its queue and no event came for a while
    /// (the oracle's `settle`). A restart loop never goes quiet; the wait is bounded.
    async fn settle(&mut self) {
        let started = Instant::now();
        let mut quiet_rounds = 0;
        while quiet_rounds < 3 && started.elapsed() < Duration::from_millis(400) {
            tokio::time::sleep(Duration::from_millis(15)).await;
            for (_, sup) in self.supervisors().await {
                let _ = sup.sync().await;
            }
            if self.drain_events() == 0 {
                quiet_rounds += 1;
            } else {
                quiet_rounds = 0;
            }
        }
    }

    async fn crash(&mut self, id: &str, reason: &str) {
        let Some(child) = self.child(id).await else {
            self.trace.push(format!("no_pid {id}"));
            return;
        };
        let exit = match reason {
            "normal" => ExitReason::Normal,
            "shutdown" => ExitReason::Shutdown,
            "shutdown_tag" => ExitReason::ShutdownWith("tag".into()),
            "kill" => ExitReason::Killed,
            _ => ExitReason::Abnormal("abnormal".into()),
        };
        match child.gpu() {
            Some(gpu) => {
                let device = self.device.as_ref().unwrap();
                if self.mode == Mode::Mirrored {
                    let mirror = gpu.mirror().expect("a running mirrored child has its mirror");
                    assert_eq!(child.actor().map(|a| a.get_id()), Some(mirror.get_id()), "the child's actor is it");
                }
                match exit {
                    ExitReason::Abnormal(_) => {
                        gpu.send(&fail_msg()).unwrap();
                    }
                    ExitReason::Normal => drop(device.drain(gpu.slot()).unwrap()),
                    ExitReason::Killed => drop(device.kill(gpu.slot()).unwrap()),
                    other => assert!(gpu.exit(other), "a running GPU child takes an exit"),
                }
            }
            None => match (exit, child.actor().expect("a running host child has an actor")) {
                (ExitReason::Killed, cell) => cell.kill(),
                (other, cell) => {
                    let actor: ActorRef<WorkerMsg> = cell.into();
                    actor.send_message(WorkerMsg::Exit(other)).unwrap();
                }
            },
        }
    }

    /// An unpaced crash storm (the oracle's `storm`): each new incarnation of child `id` is crashed
    /// (abnormal) as soon as the last crash is over, `n` times, never waiting for the supervisor to report
    /// the restart. A GPU child: `n` failing calls through its handle, each sent once the last one was
    /// answered (the handle holds a call made while the child restarts for the next incarnation); a host
    /// child: its next actor crashed as soon as it exists. Ends early once the child is gone for good.
    async fn storm(&mut self, id: &str, n: u32) {
        let Some(child) = self.child(id).await else {
            self.trace.push(format!("no_pid {id}"));
            return;
        };
        let mut last = None;
        for _ in 0..n {
            match child.gpu() {
                Some(gpu) => {
                    if !matches!(
                        gpu.call(&fail_msg(), Duration::from_secs(10)).await,
                        Err(SendError::Undelivered { .. })
                    ) {
                        return; // gone: the supervisor gave up
                    }
                }
                None => {
                    let deadline = Instant::now() + Duration::from_secs(1);
                    let actor = loop {
                        match child.actor() {
                            Some(cell) if Some(cell.get_id()) != last => break cell,
                            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(1)).await,
                            _ => return, // no new incarnation: the supervisor gave up
                        }
                    };
                    last = Some(actor.get_id());
                    let worker: ActorRef<WorkerMsg> = actor.clone().into();
                    let _ = worker.send_message(WorkerMsg::Exit(ExitReason::Abnormal("abnormal".into())));
                    // as the oracle's storm: the next crash waits for this one's process to be gone (5 s at most)
                    let gone_by = Instant::now() + Duration::from_secs(5);
                    while !matches!(actor.get_status(), ringvisor::supervisor::ractor::ActorStatus::Stopped) {
                        if Instant::now() > gone_by {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        }
    }

    async fn which(&mut self, sup_id: &str) {
        let line = match self.supervisor(sup_id).await {
            None => format!("which {sup_id} noproc"),
            Some(sup) => match sup.which_children().await {
                Err(_) => format!("which {sup_id} noproc"),
                Ok(mut children) => {
                    children.sort_by(|a, b| a.id.cmp(&b.id));
                    let items: String = children.iter().map(|c| format!(" {}:{}", c.id, c.state.label())).collect();
                    format!("which {sup_id}{items}")
                }
            },
        };
        self.drain_events();
        self.trace.push(line);
    }

    async fn count(&mut self, sup_id: &str) {
        let count = match self.supervisor(sup_id).await {
            Some(sup) => sup.count_children().await.ok(),
            None => None,
        };
        let line = match count {
            Some(c) => format!(
                "count {sup_id} specs={} active={} supervisors={} workers={}",
                c.specs, c.active, c.supervisors, c.workers
            ),
            None => format!("count {sup_id} noproc"),
        };
        self.drain_events();
        self.trace.push(line);
    }

    async fn admin(&mut self, op: &str, sup_id: &str, words: &[String]) {
        let sup = self.supervisor(sup_id).await;
        let (id, result) = match (op, sup) {
            ("start_child", sup) => {
                let refs: Vec<&str> = words.iter().map(String::as_str).collect();
                let kvs = kv(&refs);
                let id = kvs["id"].clone();
                let spec = child_spec(&id, &kvs, self.mode, &self.starts);
                let r = match sup {
                    Some(s) => s.start_child(spec).await.map(|_| ()),
                    None => Err(SupervisorError::NoProc),
                };
                (id, result_word(&r))
            }
            (_, None) => (words[0].clone(), "error:noproc"),
            ("terminate_child", Some(s)) => (words[0].clone(), result_word(&s.terminate_child(&words[0]).await)),
            ("restart_child", Some(s)) => (words[0].clone(), result_word(&s.restart_child(&words[0]).await)),
            ("delete_child", Some(s)) => (words[0].clone(), result_word(&s.delete_child(&words[0]).await)),
            (other, _) => panic!("unknown admin op {other}"),
        };
        self.drain_events();
        self.trace.push(format!("{op} {id} -> {result}"));
    }
}

/// Runs `scenario` in `mode` and returns its trace.
pub async fn run(scenario: &Scenario, mode: Mode) -> Vec<String> {
    let starts: Starts = Arc::default();
    let (services, device) = match mode {
        Mode::Host => (Services::host_only(), None),
        Mode::Gpu | Mode::Wgpu | Mode::Mirrored => {
            let slots = (count_workers(&scenario.tree) + 8).next_power_of_two();
            // GPU mode on the backend RINGVISOR_BACKEND names (the CPU backend when unset; the real GPU in
            // scripts/gpu-suite.sh)
            let backend = match mode {
                Mode::Wgpu => Backend::Wgpu(WgpuConfig::default()),
                _ => Backend::default(),
            };
            let config = DeviceConfig::default()
                .backend(backend)
                .slots(slots)
                .inbox_capacity(16)
                .outbox_capacity(16)
                .state_bytes(64)
                .behaviours(BehaviourSet::builtins());
            let device = Device::open(config).expect("device opens");
            (Services::with_device(device.clone()), Some(device))
        }
    };
    let events = services.events().subscribe();
    let spec = sup_spec(&scenario.tree, mode, &starts);
    let mut run = Run {
        mode,
        services: services.clone(),
        device,
        root_id: scenario.tree.id.clone(),
        root: None,
        events,
        trace: Vec::new(),
        starts,
    };
    match SupervisorRef::start(&scenario.tree.id, spec, services).await {
        Ok(root) => run.root = Some(root),
        Err(e) => run.trace.push(format!("sup_start {} {e}", scenario.tree.id)),
    }
    run.settle().await;
    for action in &scenario.actions {
        let words: Vec<&str> = action.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["crash", id, reason] => run.crash(id, reason).await,
            ["storm", id, n] => run.storm(id, n.parse().unwrap()).await,
            ["sleep", ms] => tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await,
            ["which", sup] => run.which(sup).await,
            ["count", sup] => run.count(sup).await,
            ["stop"] => match run.root.clone() {
                Some(root) if root.is_alive() => root.shutdown().await,
                _ => run.trace.push("stop noproc".to_string()),
            },
            [op, sup, rest @ ..] => run.admin(op, sup, &rest.iter().map(|s| s.to_string()).collect::<Vec<_>>()).await,
            other => panic!("unknown action {other:?}"),
        }
        run.settle().await;
    }
    run.settle().await;
    run.drain_events();
    if let Some(d) = &run.device {
        d.shutdown();
    }
    run.trace
}

/// Collapses runs of the same `start_fail` line: how many attempts a restart loop makes between two
/// actions depends on speed, not on semantics.
pub fn normalise(trace: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(trace.len());
    for line in trace {
        if line.starts_with("start_fail ") && out.last() == Some(line) {
            continue;
        }
        out.push(line.clone());
    }
    out
}
