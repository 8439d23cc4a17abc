//! The supervisor: a ractor actor that keeps its own ordered child list and applies OTP's supervisor
//! semantics to it (strategies, restart types, intensity, shutdown specs, significant children, the admin
//! API). The comments name the OTP `supervisor.erl` function each piece follows.

use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::child::StartContext;
use crate::error::SupervisorError;
use crate::events::TreeEvent;
use crate::handle::{ChildRef, ChildShared, ChildStatus};
use crate::intensity::Intensity;
use crate::reason::{stop_reason, ExitReason};
use crate::services::Services;
use crate::slot_actor::{retire_slot, stop_orphaned_slot, SlotActor, SlotArgs};
use crate::spec::{AutoShutdown, ChildSpec, ChildStart, ChildType, Restart, Shutdown, Strategy, SupervisorSpec};

type Reply<T> = RpcReplyPort<Result<T, SupervisorError>>;

/// The reason a spawn failed, without ractor's wrapping.
pub(crate) fn spawn_error(e: ractor::SpawnErr) -> String {
    match e {
        ractor::SpawnErr::StartupFailed(inner) => inner.to_string(),
        other => other.to_string(),
    }
}

/// A message to a supervisor. Use [`SupervisorRef`]'s methods rather than building these.
pub struct SupervisorMsg(Msg);

enum Msg {
    StartChild(Box<ChildSpec>, Reply<ChildRef>),
    StartDynamic(Vec<u8>, Reply<ChildRef>),
    TerminateChild(String, Reply<()>),
    RestartChild(String, Reply<ChildRef>),
    DeleteChild(String, Reply<()>),
    WhichChildren(RpcReplyPort<Vec<ChildInfo>>),
    CountChildren(RpcReplyPort<ChildCount>),
    GetChildSpec(String, Reply<ChildSpec>),
    /// OTP's `try_again_restart` (and the end of a backoff delay).
    Retry {
        id: String,
        after_backoff: bool,
    },
    Sync(RpcReplyPort<()>),
}

/// A child's run state as `which_children` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Running.
    Running,
    /// Being restarted (a start failed and a retry is queued, or a backoff delay runs).
    Restarting,
    /// Not running (OTP `undefined`).
    Undefined,
}

impl RunState {
    /// OTP's word for it: `running`, `restarting`, `undefined`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Restarting => "restarting",
            Self::Undefined => "undefined",
        }
    }
}

/// One entry of `which_children`.
#[derive(Clone, Debug)]
pub struct ChildInfo {
    /// The child's id.
    pub id: String,
    /// Its run state.
    pub state: RunState,
    /// Worker or supervisor.
    pub child_type: ChildType,
    /// Its stable handle.
    pub child: ChildRef,
}

/// The answer of `count_children`, as OTP's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildCount {
    /// Child specs held.
    pub specs: usize,
    /// Children running.
    pub active: usize,
    /// Specs of supervisor children.
    pub supervisors: usize,
    /// Specs of worker children.
    pub workers: usize,
}

enum Run {
    Running(ActorCell),
    Restarting,
    Undefined,
}

struct Child {
    spec: ChildSpec,
    run: Run,
    shared: Arc<ChildShared>,
    /// Start attempts so far (the first start is attempt 1).
    attempts: u32,
    /// Arguments of a dynamic start.
    args: Vec<u8>,
    started_at: Option<Instant>,
    /// Consecutive restarts, for backoff.
    consecutive: u32,
}

impl Child {
    fn running(&self) -> Option<&ActorCell> {
        match &self.run {
            Run::Running(cell) => Some(cell),
            _ => None,
        }
    }

    fn run_state(&self) -> RunState {
        match self.run {
            Run::Running(_) => RunState::Running,
            Run::Restarting => RunState::Restarting,
            Run::Undefined => RunState::Undefined,
        }
    }

    fn handle(&self) -> ChildRef {
        ChildRef { shared: self.shared.clone() }
    }
}

/// The supervisor actor. Start a tree with [`SupervisorRef::start`].
pub struct Supervisor;

/// Arguments of a supervisor actor.
pub struct SupervisorArgs {
    id: String,
    spec: SupervisorSpec,
    services: Services,
    root: bool,
}

/// A supervisor's state (its ordered child list and restart history).
pub struct SupervisorState {
    id: String,
    strategy: Strategy,
    auto_shutdown: AutoShutdown,
    intensity: Intensity,
    template: Option<ChildSpec>,
    children: Vec<Child>,
    services: Services,
    root: bool,
    next_dynamic: u64,
    exit_reason: ExitReason,
    stopping: bool,
}

/// What a restart decided.
#[derive(PartialEq, Eq)]
enum Outcome {
    Continue,
    /// The supervisor is shutting down (intensity exceeded or auto_shutdown).
    Stop,
}

fn strategy_label(s: Strategy) -> &'static str {
    match s {
        Strategy::OneForOne => "one_for_one",
        Strategy::OneForAll => "one_for_all",
        Strategy::RestForOne => "rest_for_one",
        Strategy::SimpleOneForOne => "simple_one_for_one",
    }
}

impl SupervisorState {
    fn emit(&self, event: TreeEvent) {
        self.services.events().emit(event);
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.children.iter().position(|c| c.spec.id == id)
    }

    /// A child record for `spec`, with its slot taken for a GPU child.
    fn new_child(&self, spec: ChildSpec, args: Vec<u8>) -> Result<Child, SupervisorError> {
        let target = spec.name.clone().unwrap_or_else(|| spec.id.clone());
        let gpu = match &spec.start {
            ChildStart::Gpu(g) => {
                let slots = self.services.gpu().ok_or_else(|| {
                    SupervisorError::NoSlot(format!("GPU child `{}` needs a runtime with a device", spec.id))
                })?;
                let slot = slots.pool.acquire(g.wanted_slot()).ok_or_else(|| {
                    SupervisorError::NoSlot(match g.wanted_slot() {
                        Some(s) => format!("slot {s} for `{}` is taken or out of range", spec.id),
                        None => format!("no free slot for `{}`", spec.id),
                    })
                })?;
                slots.claim(slot, target);
                Some((slots, slot, self.services.dead_letters().clone()))
            }
            _ => None,
        };
        if let Some(name) = spec.name.as_ref().filter(|n| self.services.registry().lookup(n).is_some()) {
            if let Some((slots, slot, _)) = &gpu {
                slots.unclaim(*slot);
                slots.pool.release(*slot);
            }
            return Err(crate::registry::RegistryError::Taken(name.clone()).into());
        }
        let shared = ChildShared::new(spec.id.clone(), spec.name.clone(), gpu);
        Ok(Child { spec, run: Run::Undefined, shared, attempts: 0, args, started_at: None, consecutive: 0 })
    }

    /// Drops a child's spec for good: handles see `Gone`, its name and slot are released.
    fn retire(&self, child: Child) {
        child.shared.set_down(ChildStatus::Gone);
        if let Some(name) = &child.spec.name {
            self.services.registry().unbind(name, &child.handle());
        }
        if let Some(gpu) = &child.shared.gpu {
            retire_slot(gpu);
            gpu.slots.unclaim(gpu.slot());
            gpu.slots.pool.release(gpu.slot());
        }
    }

    /// A child that ended and is not restarted: OTP `del_child`. Temporary and dynamic children are dropped;
    /// the others keep their spec, their handles see `Stopped`, and a failed device actor is killed.
    fn stop_keeping_spec(&mut self, idx: usize) {
        let child = &self.children[idx];
        if child.spec.restart == Restart::Temporary || self.strategy == Strategy::SimpleOneForOne {
            self.remove_child(idx);
        } else {
            child.shared.set_down(ChildStatus::Stopped);
            if let Some(gpu) = &child.shared.gpu {
                retire_slot(gpu);
            }
        }
    }

    fn remove_child(&mut self, idx: usize) {
        let child = self.children.remove(idx);
        self.retire(child);
    }

    /// OTP `do_start_child`: starts one incarnation of child `idx`.
    async fn start_child(&mut self, myself: &ActorRef<SupervisorMsg>, idx: usize) -> Result<(), String> {
        let services = self.services.clone();
        let sup_cell = myself.get_cell();
        let child = &mut self.children[idx];
        child.attempts += 1;
        let attempt = child.attempts;
        let id = child.spec.id.clone();
        let started: Result<ActorCell, String> = match &child.spec.start {
            ChildStart::Gpu(g) => {
                let behaviour = match services.device().map(|d| d.behaviours().id(g.behaviour())) {
                    Some(Some(b)) => Ok(b),
                    Some(None) => Err(format!("unknown behaviour `{}`", g.behaviour())),
                    None => Err("no device attached to this supervision tree".to_string()),
                };
                match behaviour {
                    Ok(behaviour) => {
                        let args = SlotArgs {
                            shared: child.shared.clone(),
                            services: services.clone(),
                            behaviour,
                            init: g.init_for(attempt, &child.args),
                            start_timeout: g.timeout(),
                            heartbeat_timeout: g.watchdog(),
                        };
                        SlotActor::spawn_linked(None, SlotActor, args, sup_cell)
                            .await
                            .map(|(r, _)| r.get_cell())
                            .map_err(spawn_error)
                    }
                    Err(e) => Err(e),
                }
            }
            ChildStart::Supervisor(spec) => {
                let args =
                    SupervisorArgs { id: id.clone(), spec: (**spec).clone(), services: services.clone(), root: false };
                Supervisor::spawn_linked(None, Supervisor, args, sup_cell)
                    .await
                    .map(|(r, _)| r.get_cell())
                    .map_err(spawn_error)
            }
            ChildStart::Actor(factory) => {
                let ctx =
                    StartContext { supervisor: sup_cell, id: id.clone(), attempt, args: child.args.clone(), services };
                factory.start(ctx).await
            }
        };
        let child_type = child.spec.child_type();
        match started {
            Ok(cell) => {
                child.run = Run::Running(cell.clone());
                child.started_at = Some(Instant::now());
                child.shared.set_running(cell);
                if let Some(name) = child.spec.name.clone() {
                    let handle = child.handle();
                    let registry = self.services.registry();
                    if registry.lookup(&name).is_some_and(|b| b.same_child(&handle)) {
                        registry.rebound(&name);
                    } else if let Err(e) = registry.bind(&name, handle) {
                        tracing::warn!(supervisor = %self.id, child = %id, error = %e, "registry name not bound");
                    }
                }
                tracing::info!(supervisor = %self.id, child = %id, attempt, "child started");
                self.emit(TreeEvent::ChildStarted { supervisor: self.id.clone(), child: id, child_type });
                Ok(())
            }
            Err(error) => {
                tracing::warn!(supervisor = %self.id, child = %id, attempt, %error, "child failed to start");
                self.emit(TreeEvent::ChildStartFailed {
                    supervisor: self.id.clone(),
                    child: id,
                    child_type,
                    error: error.clone(),
                });
                Err(error)
            }
        }
    }

    /// OTP `do_terminate` / `shutdown`: stops a running child by its shutdown spec and reports the exit.
    async fn terminate_child(&mut self, idx: usize) {
        let child = &mut self.children[idx];
        let Run::Running(cell) = std::mem::replace(&mut child.run, Run::Undefined) else {
            return;
        };
        let reason = shutdown_actor(&cell, child.spec.shutdown).await;
        let (id, child_type) = (child.spec.id.clone(), child.spec.child_type());
        if let Some(gpu) = &child.shared.gpu {
            stop_orphaned_slot(gpu);
        }
        tracing::info!(supervisor = %self.id, child = %id, reason = reason.label(), "child terminated");
        self.emit(TreeEvent::ChildExited { supervisor: self.id.clone(), child: id, child_type, reason });
    }

    /// OTP `terminate_children`: stops the children in `from..` in reverse start order; temporary ones are
    /// dropped, the others stay as specs (and their handles wait for a restart).
    async fn terminate_from(&mut self, from: usize) {
        let mut idx = self.children.len();
        while idx > from {
            idx -= 1;
            self.terminate_child(idx).await;
            if self.children[idx].spec.restart == Restart::Temporary {
                self.remove_child(idx);
            } else {
                self.children[idx].shared.set_down(ChildStatus::Restarting);
            }
        }
    }

    /// OTP `start_children` over `from..` in start order; on a failure, the failed child is marked
    /// restarting and its id returned (the caller queues a retry).
    async fn start_from(&mut self, myself: &ActorRef<SupervisorMsg>, from: usize) -> Result<(), String> {
        for idx in from..self.children.len() {
            if self.start_child(myself, idx).await.is_err() {
                self.children[idx].run = Run::Restarting;
                self.children[idx].shared.set_down(ChildStatus::Restarting);
                return Err(self.children[idx].spec.id.clone());
            }
        }
        Ok(())
    }

    fn retry_later(&self, myself: &ActorRef<SupervisorMsg>, id: String) {
        let _ = myself.send_message(SupervisorMsg(Msg::Retry { id, after_backoff: false }));
    }

    /// The backoff delay before restarting child `idx`, if it has a backoff policy.
    fn backoff_delay(&mut self, idx: usize) -> Option<std::time::Duration> {
        let child = &mut self.children[idx];
        let backoff = child.spec.backoff?;
        if child.started_at.is_some_and(|t| t.elapsed() >= backoff.reset_after) {
            child.consecutive = 0;
        }
        child.consecutive += 1;
        Some(backoff.delay(child.consecutive, rand::random::<f64>()))
    }

    /// OTP `restart/2`: counts the restart against intensity, then restarts by strategy.
    async fn restart(&mut self, myself: &ActorRef<SupervisorMsg>, idx: usize, after_backoff: bool) -> Outcome {
        let id = self.children[idx].spec.id.clone();
        if !after_backoff {
            if let Some(delay) = self.backoff_delay(idx) {
                tracing::info!(supervisor = %self.id, child = %id, ?delay, "restart after backoff");
                self.children[idx].run = Run::Restarting;
                self.children[idx].shared.set_down(ChildStatus::Restarting);
                let msg = SupervisorMsg(Msg::Retry { id, after_backoff: true });
                myself.send_after(delay, move || msg);
                return Outcome::Continue;
            }
        }
        if !self.intensity.add_restart(Instant::now()) {
            tracing::error!(supervisor = %self.id, child = %id, "restart intensity reached: shutting down");
            metrics::counter!("ringvisor_escalations_total", "supervisor" => self.id.clone()).increment(1);
            self.emit(TreeEvent::IntensityReached { supervisor: self.id.clone() });
            return self.shut_down(myself);
        }
        metrics::counter!("ringvisor_restarts_total", "supervisor" => self.id.clone(), "child" => id.clone(),
            "strategy" => strategy_label(self.strategy))
        .increment(1);
        self.emit(TreeEvent::Restarting { supervisor: self.id.clone(), child: id.clone() });
        let result = match self.strategy {
            Strategy::OneForOne | Strategy::SimpleOneForOne => match self.start_child(myself, idx).await {
                Ok(()) => Ok(()),
                Err(_) => {
                    self.children[idx].run = Run::Restarting;
                    self.children[idx].shared.set_down(ChildStatus::Restarting);
                    Err(id)
                }
            },
            Strategy::RestForOne => {
                self.terminate_from(idx + 1).await;
                self.start_from(myself, idx).await
            }
            Strategy::OneForAll => {
                // The exited child is not running; every other child is stopped, then all start again.
                self.terminate_from(0).await;
                self.start_from(myself, 0).await
            }
        };
        if let Err(failed) = result {
            self.retry_later(myself, failed);
        }
        self.record_gauges();
        Outcome::Continue
    }

    fn shut_down(&mut self, myself: &ActorRef<SupervisorMsg>) -> Outcome {
        self.stopping = true;
        self.exit_reason = ExitReason::Shutdown;
        myself.stop(Some(stop_reason::SHUTDOWN.to_string()));
        Outcome::Stop
    }

    /// OTP `restart_child/3` + `do_restart`: a child exited on its own.
    async fn child_exited(&mut self, myself: &ActorRef<SupervisorMsg>, idx: usize, reason: ExitReason) -> Outcome {
        let child = &mut self.children[idx];
        child.run = Run::Undefined;
        let (id, child_type) = (child.spec.id.clone(), child.spec.child_type());
        if let Some(gpu) = &child.shared.gpu {
            stop_orphaned_slot(gpu);
        }
        tracing::info!(supervisor = %self.id, child = %id, reason = %reason, "child exited");
        self.emit(TreeEvent::ChildExited {
            supervisor: self.id.clone(),
            child: id,
            child_type,
            reason: reason.clone(),
        });
        let child = &self.children[idx];
        let restart = match child.spec.restart {
            Restart::Permanent => true,
            Restart::Transient => !reason.is_clean(),
            Restart::Temporary => false,
        };
        if restart {
            child.shared.set_down(ChildStatus::Restarting);
            return self.restart(myself, idx, false).await;
        }
        let significant = child.spec.significant;
        self.stop_keeping_spec(idx);
        self.record_gauges();
        if significant && self.auto_shutdown_due() {
            tracing::info!(supervisor = %self.id, "significant child ended: auto shutdown");
            self.emit(TreeEvent::AutoShutdown { supervisor: self.id.clone() });
            return self.shut_down(myself);
        }
        Outcome::Continue
    }

    /// OTP `do_auto_shutdown`.
    fn auto_shutdown_due(&self) -> bool {
        match self.auto_shutdown {
            AutoShutdown::Never => false,
            AutoShutdown::AnySignificant => true,
            AutoShutdown::AllSignificant => !self.children.iter().any(|c| c.spec.significant && c.running().is_some()),
        }
    }

    fn record_gauges(&self) {
        let mut counts = [0usize; 3];
        for c in &self.children {
            counts[c.run_state() as usize] += 1;
        }
        for (state, n) in [RunState::Running, RunState::Restarting, RunState::Undefined].iter().zip(counts) {
            metrics::gauge!("ringvisor_children", "supervisor" => self.id.clone(), "state" => state.label())
                .set(n as f64);
        }
    }

    fn which_children(&self) -> Vec<ChildInfo> {
        self.children
            .iter()
            .map(|c| ChildInfo {
                id: c.spec.id.clone(),
                state: c.run_state(),
                child_type: c.spec.child_type(),
                child: c.handle(),
            })
            .collect()
    }

    fn count_children(&self) -> ChildCount {
        let supervisors = self.children.iter().filter(|c| c.spec.child_type() == ChildType::Supervisor).count();
        ChildCount {
            specs: self.children.len(),
            active: self.children.iter().filter(|c| c.running().is_some()).count(),
            supervisors,
            workers: self.children.len() - supervisors,
        }
    }

    /// OTP `handle_start_child`.
    async fn admin_start_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        spec: ChildSpec,
    ) -> Result<ChildRef, SupervisorError> {
        if self.strategy == Strategy::SimpleOneForOne {
            return Err(SupervisorError::WrongStrategy("simple_one_for_one"));
        }
        if let Some(idx) = self.find(&spec.id) {
            return Err(match self.children[idx].run {
                Run::Running(_) => SupervisorError::AlreadyStarted(spec.id),
                _ => SupervisorError::AlreadyPresent(spec.id),
            });
        }
        let mut problems = Vec::new();
        crate::config::check_child(&spec, "child", &mut problems);
        if !problems.is_empty() {
            return Err(SupervisorError::InvalidSpec(problems.join("; ")));
        }
        self.add_and_start(myself, spec, Vec::new()).await
    }

    async fn add_and_start(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        spec: ChildSpec,
        args: Vec<u8>,
    ) -> Result<ChildRef, SupervisorError> {
        let id = spec.id.clone();
        let child = self.new_child(spec, args)?;
        self.children.push(child);
        let idx = self.children.len() - 1;
        match self.start_child(myself, idx).await {
            Ok(()) => {
                self.record_gauges();
                Ok(self.children[idx].handle())
            }
            Err(reason) => {
                self.remove_child(idx);
                Err(SupervisorError::StartFailed { id, reason })
            }
        }
    }

    async fn admin_start_dynamic(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        args: Vec<u8>,
    ) -> Result<ChildRef, SupervisorError> {
        let Some(template) = self.template.clone() else {
            return Err(SupervisorError::WrongStrategy(strategy_label(self.strategy)));
        };
        self.next_dynamic += 1;
        let mut spec = template;
        spec.id = format!("{}-{}", spec.id, self.next_dynamic);
        spec.name = spec.name.map(|n| n.replace("{id}", &spec.id));
        self.add_and_start(myself, spec, args).await
    }

    /// OTP `terminate_child`: a restarting child just stops being restarted.
    async fn admin_terminate_child(&mut self, id: &str) -> Result<(), SupervisorError> {
        let idx = self.find(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        self.terminate_child(idx).await;
        self.children[idx].run = Run::Undefined;
        self.stop_keeping_spec(idx);
        self.record_gauges();
        Ok(())
    }

    async fn admin_restart_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        id: &str,
    ) -> Result<ChildRef, SupervisorError> {
        if self.strategy == Strategy::SimpleOneForOne {
            return Err(SupervisorError::WrongStrategy("simple_one_for_one"));
        }
        let idx = self.find(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        match self.children[idx].run {
            Run::Running(_) => Err(SupervisorError::Running(id.to_string())),
            Run::Restarting => Err(SupervisorError::Restarting(id.to_string())),
            Run::Undefined => match self.start_child(myself, idx).await {
                Ok(()) => {
                    self.record_gauges();
                    Ok(self.children[idx].handle())
                }
                Err(reason) => Err(SupervisorError::StartFailed { id: id.to_string(), reason }),
            },
        }
    }

    fn admin_delete_child(&mut self, id: &str) -> Result<(), SupervisorError> {
        if self.strategy == Strategy::SimpleOneForOne {
            return Err(SupervisorError::WrongStrategy("simple_one_for_one"));
        }
        let idx = self.find(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        match self.children[idx].run {
            Run::Running(_) => Err(SupervisorError::Running(id.to_string())),
            Run::Restarting => Err(SupervisorError::Restarting(id.to_string())),
            Run::Undefined => {
                self.remove_child(idx);
                self.record_gauges();
                Ok(())
            }
        }
    }
}

/// A supervisor killed without cleanup (ractor `kill`: no `post_stop`) still releases what its children
/// hold: their device actors are killed, their handles see `Gone`, their names and slots are released. (After
/// a normal stop the child list is already empty.)
impl Drop for SupervisorState {
    fn drop(&mut self) {
        for child in std::mem::take(&mut self.children) {
            if let Run::Running(cell) = &child.run {
                cell.kill();
            }
            if let Some(gpu) = &child.shared.gpu {
                stop_orphaned_slot(gpu);
            }
            self.retire(child);
        }
    }
}

/// Stops `cell` by `shutdown` and says how it ended.
async fn shutdown_actor(cell: &ActorCell, shutdown: Shutdown) -> ExitReason {
    match shutdown {
        Shutdown::BrutalKill => {
            let _ = cell.kill_and_wait(None).await;
            ExitReason::Killed
        }
        Shutdown::Timeout(limit) => {
            cell.stop(Some(stop_reason::SHUTDOWN.to_string()));
            match cell.wait(Some(limit)).await {
                Ok(()) => ExitReason::Shutdown,
                Err(_) => {
                    let _ = cell.kill_and_wait(None).await;
                    ExitReason::Killed
                }
            }
        }
        Shutdown::Infinity => {
            let _ = cell.stop_and_wait(Some(stop_reason::SHUTDOWN.to_string()), None).await;
            ExitReason::Shutdown
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    /// OTP `init` + `init_children`: starts the children in order; if one fails, the started ones are
    /// stopped in reverse order and the supervisor does not start.
    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let SupervisorArgs { id, spec, services, root } = args;
        services.events().emit(TreeEvent::SupervisorStarted { supervisor: id.clone() });
        tracing::info!(supervisor = %id, strategy = strategy_label(spec.strategy), "supervisor starting");
        let mut state = SupervisorState {
            id,
            strategy: spec.strategy,
            auto_shutdown: spec.auto_shutdown,
            intensity: Intensity::new(spec.intensity, spec.period),
            template: None,
            children: Vec::new(),
            services,
            root,
            next_dynamic: 0,
            exit_reason: ExitReason::Shutdown,
            stopping: false,
        };
        if spec.strategy == Strategy::SimpleOneForOne {
            state.template = spec.children.into_iter().next();
            return Ok(state);
        }
        for child_spec in spec.children {
            let child_id = child_spec.id.clone();
            let started = match state.new_child(child_spec, Vec::new()) {
                Ok(child) => {
                    state.children.push(child);
                    let idx = state.children.len() - 1;
                    state.start_child(&myself, idx).await
                }
                Err(e) => Err(e.to_string()),
            };
            if let Err(reason) = started {
                state.terminate_from(0).await;
                for child in std::mem::take(&mut state.children) {
                    state.retire(child);
                }
                let exit = ExitReason::ShutdownWith(format!("failed_to_start_child {child_id}"));
                state.emit(TreeEvent::SupervisorStopped { supervisor: state.id.clone(), reason: exit, root });
                return Err(format!("child `{child_id}` failed to start: {reason}").into());
            }
        }
        state.record_gauges();
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        SupervisorMsg(msg): SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        if state.stopping {
            return Ok(()); // the stop is queued ahead of anything else; replies are dropped (callers see noproc)
        }
        match msg {
            Msg::StartChild(spec, reply) => {
                let _ = reply.send(state.admin_start_child(&myself, *spec).await);
            }
            Msg::StartDynamic(args, reply) => {
                let _ = reply.send(state.admin_start_dynamic(&myself, args).await);
            }
            Msg::TerminateChild(id, reply) => {
                let _ = reply.send(state.admin_terminate_child(&id).await);
            }
            Msg::RestartChild(id, reply) => {
                let _ = reply.send(state.admin_restart_child(&myself, &id).await);
            }
            Msg::DeleteChild(id, reply) => {
                let _ = reply.send(state.admin_delete_child(&id));
            }
            Msg::WhichChildren(reply) => {
                let _ = reply.send(state.which_children());
            }
            Msg::CountChildren(reply) => {
                let _ = reply.send(state.count_children());
            }
            Msg::GetChildSpec(id, reply) => {
                let spec = state.find(&id).map(|i| state.children[i].spec.clone());
                let _ = reply.send(spec.ok_or(SupervisorError::NotFound(id)));
            }
            Msg::Retry { id, after_backoff } => {
                // OTP `try_again_restart`: only a child still marked restarting is restarted.
                if let Some(idx) = state.find(&id) {
                    if matches!(state.children[idx].run, Run::Restarting) {
                        state.restart(&myself, idx, after_backoff).await;
                    }
                }
            }
            Msg::Sync(reply) => {
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // Never ractor's default (which stops the supervisor on any child exit).
        if state.stopping {
            return Ok(());
        }
        if let Some((actor_id, reason)) = ExitReason::from_event(&event) {
            // An exit of an incarnation already replaced or terminated by us is stale: ignore it.
            if let Some(idx) = state.children.iter().position(|c| c.running().is_some_and(|a| a.get_id() == actor_id)) {
                state.child_exited(&myself, idx, reason).await;
            }
        }
        Ok(())
    }

    /// OTP `terminate`: children stop in reverse start order, then the supervisor reports its own exit.
    async fn post_stop(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        state.terminate_from(0).await;
        for child in std::mem::take(&mut state.children) {
            state.retire(child);
        }
        state.record_gauges();
        tracing::info!(supervisor = %state.id, reason = %state.exit_reason, "supervisor stopped");
        state.emit(TreeEvent::SupervisorStopped {
            supervisor: state.id.clone(),
            reason: state.exit_reason.clone(),
            root: state.root,
        });
        Ok(())
    }
}

/// A handle on a running supervisor: the admin API. Cheap to clone.
#[derive(Clone)]
pub struct SupervisorRef {
    actor: ActorRef<SupervisorMsg>,
}

impl std::fmt::Debug for SupervisorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorRef").field("actor", &self.actor.get_id()).finish()
    }
}

fn answer<T>(r: Result<ractor::rpc::CallResult<T>, impl std::fmt::Debug>) -> Result<T, SupervisorError> {
    match r {
        Ok(ractor::rpc::CallResult::Success(v)) => Ok(v),
        Ok(ractor::rpc::CallResult::Timeout) => Err(SupervisorError::Timeout),
        Ok(ractor::rpc::CallResult::SenderError) | Err(_) => Err(SupervisorError::NoProc),
    }
}

impl SupervisorRef {
    /// Starts the root supervisor of a tree (not linked to any actor). Fails if the spec is invalid or a
    /// child fails to start.
    pub async fn start(
        id: impl Into<String>,
        spec: SupervisorSpec,
        services: Services,
    ) -> Result<Self, SupervisorError> {
        spec.validate()?;
        let id = id.into();
        let args = SupervisorArgs { id: id.clone(), spec, services, root: true };
        match Supervisor::spawn(None, Supervisor, args).await {
            Ok((actor, _)) => Ok(Self { actor }),
            Err(e) => Err(SupervisorError::StartFailed { id, reason: spawn_error(e) }),
        }
    }

    /// A handle on a nested supervisor from its child handle (its current incarnation).
    pub fn from_child(child: &ChildRef) -> Option<Self> {
        let cell = child.actor()?;
        (cell.is_message_type_of::<SupervisorMsg>() != Some(false)).then(|| Self { actor: cell.into() })
    }

    /// The supervisor's ractor actor.
    pub fn actor(&self) -> &ActorRef<SupervisorMsg> {
        &self.actor
    }

    async fn call<T: Send + 'static>(&self, build: impl FnOnce(RpcReplyPort<T>) -> Msg) -> Result<T, SupervisorError> {
        answer(self.actor.call(|port| SupervisorMsg(build(port)), None).await)
    }

    /// Adds a child and starts it (`already_started` / `already_present` if the id exists).
    pub async fn start_child(&self, spec: ChildSpec) -> Result<ChildRef, SupervisorError> {
        self.call(|p| Msg::StartChild(Box::new(spec), p)).await?
    }

    /// `simple_one_for_one`: starts a child from the template; `args` are the init bytes of a GPU child or
    /// [`StartContext::args`] of a host actor.
    pub async fn start_dynamic(&self, args: Vec<u8>) -> Result<ChildRef, SupervisorError> {
        self.call(|p| Msg::StartDynamic(args, p)).await?
    }

    /// Stops a child (keeps its spec unless it is temporary or dynamic).
    pub async fn terminate_child(&self, id: &str) -> Result<(), SupervisorError> {
        let id = id.to_string();
        self.call(|p| Msg::TerminateChild(id, p)).await?
    }

    /// Starts a stopped child again (`running` / `restarting` / `not_found` otherwise).
    pub async fn restart_child(&self, id: &str) -> Result<ChildRef, SupervisorError> {
        let id = id.to_string();
        self.call(|p| Msg::RestartChild(id, p)).await?
    }

    /// Removes a stopped child's spec (`running` / `restarting` / `not_found` otherwise).
    pub async fn delete_child(&self, id: &str) -> Result<(), SupervisorError> {
        let id = id.to_string();
        self.call(|p| Msg::DeleteChild(id, p)).await?
    }

    /// Every child in start order.
    pub async fn which_children(&self) -> Result<Vec<ChildInfo>, SupervisorError> {
        self.call(Msg::WhichChildren).await
    }

    /// Counts of specs, running children, supervisors and workers.
    pub async fn count_children(&self) -> Result<ChildCount, SupervisorError> {
        self.call(Msg::CountChildren).await
    }

    /// The spec of a child.
    pub async fn get_childspec(&self, id: &str) -> Result<ChildSpec, SupervisorError> {
        let id = id.to_string();
        self.call(|p| Msg::GetChildSpec(id, p)).await?
    }

    /// The handle of a child, by id.
    pub async fn child(&self, id: &str) -> Result<ChildRef, SupervisorError> {
        let children = self.which_children().await?;
        children.into_iter().find(|c| c.id == id).map(|c| c.child).ok_or_else(|| SupervisorError::NotFound(id.into()))
    }

    /// Returns once the supervisor has handled every message sent to it before this call.
    pub async fn sync(&self) -> Result<(), SupervisorError> {
        self.call(Msg::Sync).await
    }

    /// True while the supervisor runs.
    pub fn is_alive(&self) -> bool {
        matches!(self.actor.get_status(), ractor::ActorStatus::Running | ractor::ActorStatus::Starting)
    }

    /// Shuts the supervisor down (children in reverse start order) and waits until it has stopped.
    pub async fn shutdown(&self) {
        let _ = self.actor.stop_and_wait(Some(stop_reason::SHUTDOWN.to_string()), None).await;
    }

    /// Waits until the supervisor has stopped (for whatever reason).
    pub async fn wait(&self) {
        let _ = self.actor.wait(None).await;
    }
}
