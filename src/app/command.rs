//! The `ringvisor` command, as a library entry point ([`main`]) so that a program with behaviours of its
//! own is the full command with them.
//!
//! - `ringvisor demo`: the main job (CPU backend by default; `--backend` picks another): 256 sensor actors
//!   detecting planted anomalies under a fault a second, then a summary that accounts for every reading.
//! - `ringvisor run TREE.toml`: start a declared tree and watch it until Ctrl-C (or `--duration`).
//! - `ringvisor check TREE.toml`: validate a declared tree, every error with its location.
//! - `ringvisor chaos TREE.toml --seed S --rate R --duration D`: run a declared tree under faults.
//!
//! On a terminal the command shows the live view; elsewhere a progress line a second; `--json` prints one
//! JSON object per line. `--metrics-addr ADDR` serves Prometheus metrics. Ctrl-C (or `q` in the live view)
//! stops the tree in order (reverse start order, shutdown specs honoured) and prints the summary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::chaos::{settle, ChaosTask};
use super::demo::{Demo, DemoConfig};
use super::live::LiveView;
use super::monitor::Monitor;
use super::report::{self, Output};
use crate::device::{Backend, BehaviourSet, DeviceConfig};
use crate::faults::InjectedFault;
use crate::supervisor::{ExitReason, SpecErrors, SpecLoader};
use crate::{Runtime, RuntimeEnd};
use clap::{Parser, Subcommand};
use tokio::sync::Notify;

#[derive(Parser)]
#[command(name = "ringvisor", version, about = "Erlang/OTP-style supervision for persistent GPU actors")]
struct Cli {
    /// Print one JSON object per line (tree events, progress, summary) instead of the live view.
    #[arg(long, global = true)]
    json: bool,
    /// Print plain progress lines even on a terminal.
    #[arg(long, global = true)]
    plain: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (for example 127.0.0.1:9100).
    #[arg(long, global = true, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// The device backend: cpu, cuda, cuda-event, cuda-emulated or wgpu [default: $RINGVISOR_BACKEND, else cpu].
    #[arg(long, global = true, value_name = "NAME", value_parser = backend)]
    backend: Option<Backend>,
    /// Devices a declared tree runs on (`run`, `chaos`, `node`): independent executors on the CPU backend,
    /// GPUs 0..N on CUDA; GPU children are placed by their spec (`device`, `placement`).
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    devices: u32,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job (on the CPU backend unless `--backend` says otherwise): a sensor fleet detecting planted
    /// anomalies while faults strike.
    Demo {
        /// How long the load runs, seconds.
        #[arg(long, default_value = "15", value_parser = seconds)]
        duration: Duration,
        /// Sensor actors.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
        sensors: u32,
        /// Readings per second per sensor.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        rate: u32,
        /// Seed of the readings, the planted anomalies and the faults.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// No faults.
        #[arg(long)]
        no_chaos: bool,
    },
    /// Start a declared tree (TOML) and watch it until Ctrl-C or the duration.
    Run {
        /// The tree file.
        tree: PathBuf,
        /// Stop after this many seconds.
        #[arg(long, value_parser = seconds)]
        duration: Option<Duration>,
        /// Device slots [default: the program's device configuration; 1024 for `ringvisor`].
        #[arg(long)]
        slots: Option<u32>,
    },
    /// Run a declared tree (TOML) as a node of a cluster (ractor_cluster): the other nodes find its actors
    /// and call them by name. Prints `ready` once started and connected; stops on Ctrl-C or the duration.
    #[cfg(feature = "cluster")]
    Node {
        /// The tree file.
        tree: PathBuf,
        /// The node's name (unique in the cluster).
        #[arg(long)]
        name: String,
        /// The TCP port to listen on for other nodes (127.0.0.1).
        #[arg(long)]
        port: u16,
        /// The magic cookie: nodes with another cookie are refused.
        #[arg(long)]
        cookie: String,
        /// A node to connect to (`host:port`); repeat for several (their peers are connected too).
        #[arg(long)]
        connect: Vec<String>,
        /// Stop after this many seconds.
        #[arg(long, value_parser = seconds)]
        duration: Option<Duration>,
        /// Device slots [default: the program's device configuration; 1024 for `ringvisor`].
        #[arg(long)]
        slots: Option<u32>,
    },
    /// Validate a declared tree (TOML) against the devices `run` would open: every error with its file, line
    /// and column; exits non-zero if there is one. Prints the tree as a table otherwise.
    Check {
        /// The tree file.
        tree: PathBuf,
        /// Device slots [default: the program's device configuration; 1024 for `ringvisor`].
        #[arg(long)]
        slots: Option<u32>,
    },
    /// Run a declared tree (TOML) under seeded faults and print the chaos summary.
    Chaos {
        /// The tree file.
        tree: PathBuf,
        /// Seed of the fault schedule (the same seed replays the same faults).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Faults per second.
        #[arg(long, default_value = "10", value_parser = rate)]
        rate: f64,
        /// How long the faults run, seconds.
        #[arg(long, default_value = "10", value_parser = seconds)]
        duration: Duration,
        /// Device slots [default: the program's device configuration; 1024 for `ringvisor`].
        #[arg(long)]
        slots: Option<u32>,
    },
}

fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v > 0.0 && v <= 86_400.0) {
        return Err("must be between 0 and 86400 seconds".into());
    }
    Ok(Duration::from_secs_f64(v))
}

fn backend(s: &str) -> Result<Backend, String> {
    Backend::parse(s).map_err(|e| e.to_string())
}

fn rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v > 0.0 && v <= 10_000.0) {
        return Err("must be between 0 and 10000 faults per second".into());
    }
    Ok(v)
}

type BoxError = Box<dyn std::error::Error>;

/// Runs the `ringvisor` command, arguments taken from the process, as a program with behaviours of its own:
/// `run`, `check`, `chaos` and `node` open their devices with `device` (its behaviours are what a tree may
/// use; its sizes, `bulk_bytes` and `state_bytes` included, are every device's; `--slots` and `--backend`
/// override its slots and backend). The built-in `demo` is the `ringvisor` command's own job and not part of
/// this one.
///
/// ```no_run
/// use ringvisor::device::{BehaviourSet, DeviceConfig};
///
/// fn main() -> std::process::ExitCode {
///     let behaviours = BehaviourSet::builtins(); // + `register` your own
///     ringvisor::app::command::main_with(DeviceConfig::default().slots(512).bulk_bytes(4096).behaviours(behaviours))
/// }
/// ```
pub fn main_with(device: DeviceConfig) -> ExitCode {
    start(Setup { device, with_demo: false })
}

/// [`main_with`] a default device of 1,024 slots with `behaviours`.
pub fn main(behaviours: BehaviourSet) -> ExitCode {
    main_with(DeviceConfig::default().slots(DEFAULT_SLOTS).behaviours(behaviours))
}

/// The `ringvisor` command itself: the built-in behaviours, and the `demo`.
pub fn ringvisor() -> ExitCode {
    start(Setup { device: DeviceConfig::default().slots(DEFAULT_SLOTS), with_demo: true })
}

/// Slots of a device of the `ringvisor` command unless `--slots` says otherwise.
const DEFAULT_SLOTS: u32 = 1024;

/// What a command binary runs with: the device of its declared trees, and whether it has the demo.
struct Setup {
    device: DeviceConfig,
    with_demo: bool,
}

/// Parses the process's arguments (the `demo` subcommand hidden from a program's own command) and runs.
fn start(setup: Setup) -> ExitCode {
    let mut command = <Cli as clap::CommandFactory>::command();
    if !setup.with_demo {
        command = command.mut_subcommand("demo", |demo| demo.hide(true));
    }
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // the runtime's threads run the supervisors, the nodes' sessions and the cluster gateway: short time slices,
    // as the devices' own threads have (see `crate::device::request_thread_slice`)
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(|| {
            crate::device::request_thread_slice(crate::device::DEFAULT_THREAD_SLICE);
        })
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(execute(cli, setup)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(2)
        }
    }
}

async fn execute(cli: Cli, setup: Setup) -> ExitCode {
    let output = Output::choose(cli.json, cli.plain);
    // Logs go to stderr only when asked for (RUST_LOG): they would tear the live view.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    if let Err(e) = install_interrupt() {
        eprintln!("error: cannot handle Ctrl-C: {e}");
        return ExitCode::from(2);
    }
    if let Some(addr) = cli.metrics_addr {
        if let Err(e) = super::prometheus::serve(addr) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    // The device every subcommand opens: the backend named on the command line, else the configuration's.
    let mut device = setup.device;
    if let Some(backend) = &cli.backend {
        device = device.backend(backend.clone());
    }
    // Where a declared tree starts: `cli.devices` devices, of `--slots` slots each if given.
    let on = |slots: Option<u32>| Devices {
        config: slots.map_or_else(|| device.clone(), |slots| device.clone().slots(slots)),
        count: cli.devices,
    };
    let result = match cli.command {
        Command::Demo { .. } if !setup.with_demo => {
            eprintln!("error: `demo` is the ringvisor command's built-in job; this program runs declared trees");
            return ExitCode::from(2);
        }
        Command::Demo { duration, sensors, rate, seed, no_chaos } => {
            let config = DemoConfig {
                sensors,
                rate,
                seed,
                chaos_every: (!no_chaos).then_some(Duration::from_secs(1)),
                ..DemoConfig::default()
            };
            let device = cli.backend.map_or_else(DeviceConfig::default, |b| DeviceConfig::default().backend(b));
            demo(config, device, duration, output).await
        }
        Command::Run { tree, duration, slots } => run_tree(on(slots), tree, duration, output).await,
        Command::Check { tree, slots } => check(on(slots), tree),
        #[cfg(feature = "cluster")]
        Command::Node { tree, name, port, cookie, connect, duration, slots } => {
            let config = crate::cluster::NodeConfig::new(name, port, cookie);
            run_node(on(slots), tree, config, connect, duration).await
        }
        Command::Chaos { tree, seed, rate, duration, slots } => {
            chaos(on(slots), tree, seed, rate, duration, output).await
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Set by the first Ctrl-C (SIGINT); `INTERRUPT` wakes the watcher.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INTERRUPT: Notify = Notify::const_new();

/// Takes over Ctrl-C from the start (the handler is registered before this returns, so a Ctrl-C that comes
/// early is not lost): the first one stops the tree in order; a second one exits at once (status 130).
fn install_interrupt() -> std::io::Result<()> {
    #[cfg(unix)]
    let mut signals = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::spawn(async move {
        for n in 0.. {
            #[cfg(unix)]
            let received = signals.recv().await.is_some();
            #[cfg(not(unix))]
            let received = tokio::signal::ctrl_c().await.is_ok();
            if !received {
                return;
            }
            if n > 0 {
                eprintln!("second Ctrl-C: exiting without an orderly stop");
                std::process::exit(130);
            }
            INTERRUPTED.store(true, Ordering::Release);
            INTERRUPT.notify_waiters();
        }
    });
    Ok(())
}

/// Why watching stopped.
#[derive(PartialEq, Eq)]
enum Stopped {
    Duration,
    Interrupted,
    TreeEnded,
}

/// With `--json`, the tree events seen since the last call, one per line.
fn print_events(monitor: &mut Monitor, output: Output) {
    let events = monitor.take_events();
    if output == Output::Json {
        for e in &events {
            println!("{}", report::event_json(e));
        }
    }
}

/// Watches `rt` until `until`, Ctrl-C (or `q` in the live view), or the end of the tree, reporting as
/// `output` says.
async fn watch(rt: &Runtime, monitor: &mut Monitor, output: Output, title: &str, until: Option<Instant>) -> Stopped {
    let mut live = (output == Output::Live).then(LiveView::enter);
    let tick = if live.is_some() { Duration::from_millis(250) } else { Duration::from_secs(1) };
    let stopped = loop {
        if INTERRUPTED.load(Ordering::Acquire) {
            break Stopped::Interrupted;
        }
        if until.is_some_and(|u| Instant::now() >= u) {
            break Stopped::Duration;
        }
        if !rt.is_running() {
            break Stopped::TreeEnded;
        }
        let snap = monitor.sample(rt).await;
        print_events(monitor, output);
        match (&mut live, output) {
            (Some(view), _) => {
                let _ = view.draw(&snap, title);
                if view.wants_stop(Duration::from_millis(20)) {
                    break Stopped::Interrupted;
                }
            }
            (None, Output::Json) => println!("{}", report::progress_json(&snap)),
            (None, _) => println!("{}", report::progress_line(&snap)),
        }
        let wait = until.map_or(tick, |u| tick.min(u.saturating_duration_since(Instant::now())));
        tokio::select! {
            _ = INTERRUPT.notified() => break Stopped::Interrupted,
            _ = tokio::time::sleep(wait) => {}
        }
    };
    drop(live);
    if stopped == Stopped::Interrupted && output != Output::Json {
        println!("interrupted: stopping the tree in order");
    }
    stopped
}

async fn demo(
    config: DemoConfig,
    device: DeviceConfig,
    duration: Duration,
    output: Output,
) -> Result<ExitCode, BoxError> {
    let sensors = config.sensors;
    let demo = Demo::start(config, device).await?;
    if output != Output::Json {
        println!(
            "ringvisor demo: {sensors} sensor actors and an alert aggregator on {}",
            demo.runtime().device().describe()
        );
    }
    let mut monitor = Monitor::new(demo.runtime());
    watch(demo.runtime(), &mut monitor, output, "ringvisor demo", Some(crate::device::deadline_after(duration))).await;
    print_events(&mut monitor, output);
    let (restarts, escalations) = monitor.counts();
    let summary = demo.finish(restarts, escalations).await?;
    match output {
        Output::Json => println!("{}", report::demo_json(&summary)),
        _ => print!("{}", report::demo_text(&summary)),
    }
    Ok(if summary.nothing_lost() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Printed after errors that name an unknown behaviour.
const REGISTER_HINT: &str = "hint: a behaviour of your own is compiled with `ringvisor-build`, registered in a \
`BehaviourSet`, and the command run from your own binary with `ringvisor::app::command::main_with(config)` \
(see docs/behaviours.md)";

/// Loads `tree` as `devices` would start it (behaviours, device count, slots), and prints it as a table, or
/// every error with its location.
fn check(devices: Devices, tree: PathBuf) -> Result<ExitCode, BoxError> {
    match devices.loader().load_file(&tree) {
        Ok(spec) => {
            print!("{}: ok\n{}", tree.display(), super::tree_table::tree_table(&spec));
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprintln!("{}: {} error(s)\n{errors}", tree.display(), errors.0.len());
            if needs_register_hint(&errors) {
                eprintln!("{REGISTER_HINT}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Whether an error names a behaviour the program does not have, and not as a near miss of one it has.
fn needs_register_hint(errors: &SpecErrors) -> bool {
    errors.0.iter().any(|e| e.message.starts_with("unknown behaviour") && !e.message.contains("did you mean"))
}

/// What a declared tree starts on: its devices, with the behaviours their device code has.
struct Devices {
    /// Each device's configuration (on CUDA, device `i` is GPU `i`).
    config: DeviceConfig,
    count: u32,
}

impl Devices {
    /// A loader that checks a tree against these devices: behaviours, device indices, slots.
    fn loader(&self) -> SpecLoader {
        SpecLoader::new()
            .behaviours(self.config.behaviours.names().map(str::to_string))
            .devices(self.count as usize)
            .slots(self.config.slots)
    }

    /// Loads the tree of `tree` (checked against these devices) and starts it.
    async fn start_tree(&self, tree: &PathBuf) -> Result<Runtime, BoxError> {
        let spec = self.loader().load_file(tree).map_err(|errors| {
            let hint = if needs_register_hint(&errors) { format!("\n{REGISTER_HINT}") } else { String::new() };
            format!("{errors}{hint}")
        })?;
        let configs = (0..self.count).map(|i| {
            let mut config = self.config.clone();
            if let Backend::Cuda(cuda) = &mut config.backend {
                cuda.ordinal = i as i32;
            }
            config
        });
        Ok(Runtime::builder().devices(configs).start(spec).await?)
    }
}

/// Prints the end-of-run summary of a declared tree.
fn tree_summary(monitor: &mut Monitor, rt: &Runtime, output: Output) {
    let (restarts, escalations) = monitor.counts();
    let dead = rt.dead_letters().stats();
    if output == Output::Json {
        println!(
            "{}",
            serde_json::json!({ "type": "summary", "restarts": restarts, "escalations": escalations,
                "dead_letters": dead.total() })
        );
    } else {
        println!("restarts {restarts}, escalations {escalations}, dead letters: {dead}");
    }
}

async fn run_tree(
    devices: Devices,
    tree: PathBuf,
    duration: Option<Duration>,
    output: Output,
) -> Result<ExitCode, BoxError> {
    let rt = devices.start_tree(&tree).await?;
    let mut monitor = Monitor::new(&rt);
    let title = format!("ringvisor run {}", tree.display());
    let stopped = watch(&rt, &mut monitor, output, &title, duration.map(crate::device::deadline_after)).await;
    print_events(&mut monitor, output);
    tree_summary(&mut monitor, &rt, output);
    let code = if stopped == Stopped::TreeEnded { tree_ended(&rt, output).await } else { ExitCode::SUCCESS };
    rt.shutdown().await;
    if output != Output::Json && code == ExitCode::SUCCESS {
        println!("stopped in order");
    }
    Ok(code)
}

/// `ringvisor node`: the tree of `tree` as the cluster node `config`, connected to `peers`, until Ctrl-C,
/// the duration or the tree's end.
#[cfg(feature = "cluster")]
async fn run_node(
    devices: Devices,
    tree: PathBuf,
    config: crate::cluster::NodeConfig,
    peers: Vec<String>,
    duration: Option<Duration>,
) -> Result<ExitCode, BoxError> {
    let rt = devices.start_tree(&tree).await?;
    let (name, port) = (config.name.clone(), config.port);
    let node = crate::cluster::Node::start(&rt, config).await?;
    for peer in &peers {
        if let Err(e) = node.connect(peer).await {
            node.stop();
            rt.shutdown().await;
            return Err(e.into());
        }
    }
    println!("ready: node {name} on port {port}, peers {:?}", node.peers().await);
    let wait = duration.unwrap_or(Duration::from_secs(86_400 * 365));
    tokio::select! {
        _ = INTERRUPT.notified() => {}
        _ = tokio::time::sleep(wait) => {}
        _ = rt.wait() => {}
    }
    node.stop();
    rt.shutdown().await;
    println!("stopped in order");
    Ok(ExitCode::SUCCESS)
}

/// Says why the tree ended by itself; a failure status unless its root exited normally.
async fn tree_ended(rt: &Runtime, output: Output) -> ExitCode {
    let end = rt.wait().await;
    match output {
        Output::Json => println!("{}", serde_json::json!({ "type": "end", "why": end.to_string() })),
        _ => println!("the tree ended: {end}"),
    }
    match end {
        RuntimeEnd::RootEnded { gave_up: false, reason: ExitReason::Normal | ExitReason::Shutdown, .. } => {
            ExitCode::SUCCESS
        }
        _ => ExitCode::FAILURE,
    }
}

async fn chaos(
    devices: Devices,
    tree: PathBuf,
    seed: u64,
    rate: f64,
    duration: Duration,
    output: Output,
) -> Result<ExitCode, BoxError> {
    let rt = devices.start_tree(&tree).await?;
    let mut monitor = Monitor::new(&rt);
    // Every fault kind but the loss of the device (each loss restarts the whole tree).
    let kinds: Vec<_> = InjectedFault::ALL.into_iter().filter(|k| *k != InjectedFault::LoseDevice).collect();
    let task = ChaosTask::spawn(rt.services().clone(), "**".into(), kinds, Duration::from_secs_f64(1.0 / rate), seed);
    let title = format!("ringvisor chaos {} (seed {seed}, {rate}/s)", tree.display());
    watch(&rt, &mut monitor, output, &title, Some(crate::device::deadline_after(duration))).await;
    let faults = task.stop().await;
    let summary = settle(&rt, &mut monitor, faults, Duration::from_secs(20)).await;
    match output {
        Output::Json => println!(
            "{}",
            serde_json::json!({ "type": "summary", "faults": summary.faults, "restarts": summary.restarts,
                "escalations": summary.escalations, "dead_letters": summary.dead_letters.total(),
                "converged_s": summary.converged.map(|d| d.as_secs_f64()), "not_running": summary.not_running })
        ),
        _ => print!("chaos summary (seed {seed}):\n{}", summary.table()),
    }
    let converged = summary.converged.is_some();
    rt.shutdown().await;
    Ok(if converged { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
