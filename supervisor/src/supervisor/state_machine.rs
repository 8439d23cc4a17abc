//! The decisions of OTP's `supervisor.erl`, one function each and named as there: start the children in order
//! (`start_children`, `do_start_child`), stop them in reverse order by their shutdown specs
//! (`terminate_children`, `do_terminate`), react to a child's exit (`restart_child`, `do_restart`), count a
//! restart against intensity and restart by strategy (`restart`), retry a failed restart through the mailbox
//! (`try_again_restart`), forget a child that is not restarted (`del_child`), and shut down on escalation or
//! when significant children ended (`shutdown`, `do_auto_shutdown`). Beyond OTP: restart backoff
//! (`backoff_delay`).

use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorRef};

use super::client::{Msg, SupervisorMsg};
use super::{Outcome, Supervisor, SupervisorArgs, SupervisorState};
use crate::child::{spawn_error, StartContext};
use crate::gpu;
use crate::mirror;
use crate::policy::{AutoShutdown, Restart, Shutdown, Strategy};
use crate::reason::{stop_reason, ExitReason};
use crate::spec::{ChildSpec, ChildStart};
use crate::status::{ChildStatus, Incarnation, Run};
use crate::tree_events::TreeEvent;

impl SupervisorState {
    pub(super) fn emit(&self, event: TreeEvent) {
        self.services.events().emit(event);
    }

    /// `do_start_child`: starts one incarnation of child `idx`.
    pub(super) async fn do_start_child(&mut self, myself: &ActorRef<SupervisorMsg>, idx: usize) -> Result<(), String> {
        let services = self.services.clone();
        let sup_cell = myself.get_cell();
        let child = &mut self.children[idx];
        child.attempts += 1;
        let attempt = child.attempts;
        let id = child.spec.id.clone();
        let started: Result<Incarnation, String> = match &child.spec.start {
            ChildStart::Gpu(g) => {
                let (init, prepared) = match child.prepared.take() {
                    Some(p) => (p.init, Some(p.pending)),
                    None => (g.init_for(attempt, &child.args), None),
                };
                let started = gpu::start(&child.shared, &services, g, init, prepared, &self.notices).await;
                started.map(Incarnation::Gpu)
            }
            ChildStart::Supervisor(spec) => {
                let mut spec = (**spec).clone();
                spec.mirrored = spec.mirrored.or(Some(self.mirrored)); // a supervisor below inherits
                let args = SupervisorArgs::nested(id.clone(), spec, services.clone());
                Supervisor::spawn_linked(None, Supervisor, args, sup_cell)
                    .await
                    .map(|(r, _)| Incarnation::Actor(r.get_cell()))
                    .map_err(spawn_error)
            }
            ChildStart::Actor(factory) => {
                let ctx =
                    StartContext { supervisor: sup_cell, id: id.clone(), attempt, args: child.args.clone(), services };
                factory.start(ctx).await.map(Incarnation::Actor)
            }
        };
        let child_type = child.spec.child_type();
        child.granted = false; // a new incarnation has no grant yet (see `refresh_grants`)
        let mirror = match &child.spec.start {
            ChildStart::Gpu(g) => g.mirror_under(self.mirrored),
            _ => None,
        };
        match started {
            Ok(incarnation) => {
                child.set_run(Run::Running(incarnation), ChildStatus::Running);
                child.started_at = Some(Instant::now());
                match mirror {
                    // found only through its handle: spawned when first asked for
                    Some(spec) if spec.on_demand() => child.shared.mirror_on_demand(),
                    Some(_) => match self.deferred_mirrors.as_mut() {
                        Some(deferred) => deferred.push(idx),
                        None => self.spawn_mirrors(vec![idx]).await,
                    },
                    None => {}
                }
                let child = &mut self.children[idx];
                if let Some(name) = child.spec.name.clone() {
                    let handle = child.handle();
                    let registry = self.services.registry();
                    match registry.bind_new(&name, handle) {
                        Ok(true) => {}
                        Ok(false) => registry.rebound(&name),
                        Err(e) => {
                            tracing::warn!(supervisor = %self.id, child = %id, error = %e, "registry name not bound")
                        }
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

    /// `init_children`: adds and starts the children of the spec in order; the first that cannot be added or
    /// started ends it, with its id and why (the caller stops the ones started).
    ///
    /// Pipelined like [`Self::start_children`]: before the first of a run of consecutive GPU children starts,
    /// the records of the whole run are added (as far as they can be: a child that cannot be added is
    /// reported at its turn, as before) and their device commands submitted as one batch.
    pub(super) async fn init_children(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        specs: Vec<ChildSpec>,
    ) -> Result<(), (String, String)> {
        self.deferred_mirrors = Some(Vec::new());
        let started = self.init_children_in_order(myself, specs).await;
        let deferred = self.deferred_mirrors.take().unwrap_or_default();
        self.spawn_mirrors(deferred).await;
        started
    }

    async fn init_children_in_order(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        specs: Vec<ChildSpec>,
    ) -> Result<(), (String, String)> {
        let mut specs = specs.into_iter().peekable();
        let mut idx = 0;
        while idx < self.children.len() || specs.peek().is_some() {
            if idx == self.children.len() {
                let Some(spec) = specs.next() else { break };
                let id = spec.id.clone();
                let child = self.new_child(spec, Vec::new()).map_err(|e| (id, e.to_string()))?;
                let gpu = matches!(child.spec.start, ChildStart::Gpu(_));
                self.children.push(child);
                if gpu {
                    while let Some(next) = specs.peek().filter(|s| matches!(s.start, ChildStart::Gpu(_))) {
                        let Ok(child) = self.new_child(next.clone(), Vec::new()) else { break };
                        self.children.push(child);
                        specs.next();
                    }
                    self.prepare_gpu_starts(idx);
                }
            }
            if let Err(reason) = self.do_start_child(myself, idx).await {
                self.cancel_prepared_starts(idx + 1..self.children.len()).await;
                return Err((self.children[idx].spec.id.clone(), reason));
            }
            idx += 1;
        }
        Ok(())
    }

    /// `start_children` over `from..`, in start order. On a failure the failed child is marked restarting
    /// and its id returned (the caller queues a retry).
    ///
    /// Pipelined: before the first of a run of consecutive GPU children starts, the device commands of the
    /// whole run are submitted in start order (one batch for the device); then each child's start, in
    /// order, waits for its own command. Starts are reported in OTP's order, and a failed start
    /// still ends the sequence: the later children's commands are taken back (what they brought up is
    /// killed) and they do not start.
    pub(super) async fn start_children(&mut self, myself: &ActorRef<SupervisorMsg>, from: usize) -> Result<(), String> {
        self.deferred_mirrors = Some(Vec::new());
        let started = self.start_children_in_order(myself, from).await;
        let deferred = self.deferred_mirrors.take().unwrap_or_default();
        self.spawn_mirrors(deferred).await;
        started
    }

    async fn start_children_in_order(&mut self, myself: &ActorRef<SupervisorMsg>, from: usize) -> Result<(), String> {
        let mut prepared_until = from;
        for idx in from..self.children.len() {
            if idx >= prepared_until {
                prepared_until = self.prepare_gpu_starts(idx);
            }
            if self.do_start_child(myself, idx).await.is_err() {
                self.cancel_prepared_starts(idx + 1..prepared_until).await;
                self.children[idx].set_run(Run::Restarting, ChildStatus::Restarting);
                return Err(self.children[idx].spec.id.clone());
            }
        }
        Ok(())
    }

    /// Spawns the mirrors of mirrored GPU children `idxs` (each running the incarnation it just started), all at
    /// once: a group start spawns its mirrors together, after its children started in order.
    pub(super) async fn spawn_mirrors(&mut self, idxs: Vec<usize>) {
        let mut spawning = tokio::task::JoinSet::new();
        for idx in idxs {
            let child = &self.children[idx];
            let (ChildStart::Gpu(g), Some(handle)) = (&child.spec.start, child.handle().gpu()) else { continue };
            let Some(spec) = g.mirror_under(self.mirrored) else { continue };
            let (name, previous) = (child.shared.target(), child.shared.last_mirror());
            spawning.spawn(async move { (idx, mirror::spawn(handle, Some(name), &spec, previous).await) });
        }
        while let Some(joined) = spawning.join_next().await {
            if let Ok((idx, Some(mirror))) = joined {
                self.children[idx].shared.set_spawned_mirror(mirror);
            }
        }
    }

    /// `do_terminate` / `shutdown`: stops a running child by its shutdown spec and reports the exit.
    pub(super) async fn do_terminate(&mut self, idx: usize) {
        if let Some(stopping) = self.begin_terminate(idx) {
            self.finish_terminate(stopping).await;
        }
    }

    /// The first half of [`Self::do_terminate`]: takes child `idx`'s running incarnation and asks it to stop
    /// by its shutdown spec, without waiting. `None` if it was not running.
    fn begin_terminate(&mut self, idx: usize) -> Option<Stopping> {
        let child = &mut self.children[idx];
        let incarnation = child.take_running()?;
        child.revoke_grant();
        let shutdown = child.spec.shutdown;
        let how = match (incarnation, &child.shared.gpu_actor) {
            (Incarnation::Gpu(generation), Some(actor)) => StopHow::Gpu(gpu::begin_stop(actor, generation, shutdown)),
            (Incarnation::Gpu(_), None) => return None,
            (Incarnation::Actor(cell), _) => {
                begin_shutdown(&cell, shutdown);
                StopHow::Actor(cell)
            }
        };
        Some(Stopping { idx, how, shutdown, issued: Instant::now() })
    }

    /// The second half of [`Self::do_terminate`]: waits for the stop (killing past the shutdown timeout) and
    /// reports the exit.
    async fn finish_terminate(&mut self, stopping: Stopping) {
        let reason = match stopping.how {
            StopHow::Actor(cell) => finish_shutdown(&cell, stopping.shutdown, stopping.issued).await,
            StopHow::Gpu(gpu_stop) => {
                let shared = self.children[stopping.idx].shared.clone();
                match &shared.gpu_actor {
                    Some(actor) => gpu::finish_stop(actor, gpu_stop, stopping.shutdown, stopping.issued).await,
                    None => ExitReason::Killed,
                }
            }
        };
        let child = &self.children[stopping.idx];
        let (id, child_type) = (child.spec.id.clone(), child.spec.child_type());
        if let Some(actor) = &child.shared.gpu_actor {
            gpu::orphan(actor);
        }
        tracing::info!(supervisor = %self.id, child = %id, reason = reason.label(), "child terminated");
        self.emit(TreeEvent::ChildExited { supervisor: self.id.clone(), child: id, child_type, reason });
    }

    /// `terminate_children` over `from..`, in reverse start order: temporary children are dropped, the others
    /// stay as specs (their handles wait for a restart).
    ///
    /// Pipelined: the stops of a run of consecutive GPU children are all issued (in reverse start order)
    /// before any is waited for, so their drains reach the device as one batch; their exits are then
    /// reported in reverse start order, as OTP does. Any other child is stopped only after the GPU children
    /// after it have stopped, and before those before it are asked to.
    pub(super) async fn terminate_children(&mut self, from: usize) {
        let mut batch: Vec<Stopping> = Vec::new();
        let mut dropped = Vec::new();
        let mut idx = self.children.len();
        while idx > from {
            idx -= 1;
            let host_side = self.children[idx].shared.gpu_actor.is_none();
            if host_side {
                self.finish_batch(&mut batch).await;
            }
            match self.begin_terminate(idx) {
                Some(stopping) => batch.push(stopping),
                None => self.mark_terminated(idx),
            }
            if host_side {
                self.finish_batch(&mut batch).await;
            }
            if self.children[idx].spec.restart == Restart::Temporary {
                dropped.push(idx);
            }
        }
        self.finish_batch(&mut batch).await;
        // Descending: removing a child does not move the ones still to remove.
        for idx in dropped {
            self.remove_child(idx);
        }
    }

    /// Waits for the stops in `batch` in the order they were issued, reporting each exit and the child's
    /// next state as it comes.
    async fn finish_batch(&mut self, batch: &mut Vec<Stopping>) {
        for stopping in batch.drain(..) {
            let idx = stopping.idx;
            self.finish_terminate(stopping).await;
            self.mark_terminated(idx);
        }
    }

    /// A child `terminate_children` stopped (or found stopped) stays as a spec whose handles wait for a
    /// restart; a temporary one is dropped once the loop is done.
    fn mark_terminated(&mut self, idx: usize) {
        if self.children[idx].spec.restart != Restart::Temporary {
            self.children[idx].set_run(Run::Undefined, ChildStatus::Restarting);
        }
    }

    /// Every child stopped in reverse start order, then dropped for good (a failed start of the supervisor,
    /// or its own stop).
    pub(super) async fn terminate_and_drop_children(&mut self) {
        self.terminate_children(0).await;
        for child in std::mem::take(&mut self.children) {
            self.retire(child);
        }
    }

    /// `restart_child/3`: child `idx` exited on its own; reports the exit, then [`Self::do_restart`].
    pub(super) async fn restart_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        idx: usize,
        reason: ExitReason,
    ) -> Outcome {
        let child = &mut self.children[idx];
        child.take_running();
        // a mirrored GPU child's mirror ends as its incarnation did (a link sees the crash)
        child.shared.end_mirror((!reason.is_clean()).then(|| reason.to_string()));
        child.granted = false;
        let (id, child_type) = (child.spec.id.clone(), child.spec.child_type());
        if let Some(actor) = &child.shared.gpu_actor {
            gpu::orphan_unless_granted(actor);
        }
        tracing::info!(supervisor = %self.id, child = %id, reason = %reason, "child exited");
        self.emit(TreeEvent::ChildExited {
            supervisor: self.id.clone(),
            child: id,
            child_type,
            reason: reason.clone(),
        });
        self.do_restart(myself, idx, reason).await
    }

    /// `do_restart`: by the child's restart type, restart it, or forget it (and maybe shut down, if it was
    /// significant).
    async fn do_restart(&mut self, myself: &ActorRef<SupervisorMsg>, idx: usize, reason: ExitReason) -> Outcome {
        let child = &mut self.children[idx];
        let restart = match child.spec.restart {
            Restart::Permanent => true,
            Restart::Transient => !reason.is_clean(),
            Restart::Temporary => false,
        };
        if restart {
            child.set_run(Run::Undefined, ChildStatus::Restarting);
            return self.restart(myself, idx, false).await;
        }
        let significant = child.spec.significant;
        self.del_child(idx);
        self.record_gauges();
        if significant && self.do_auto_shutdown() {
            tracing::info!(supervisor = %self.id, "significant child ended: auto shutdown");
            self.emit(TreeEvent::AutoShutdown { supervisor: self.id.clone() });
            return self.shutdown(myself);
        }
        Outcome::Continue
    }

    /// `restart/2`: counts the restart against intensity (escalating past it), then restarts by strategy.
    /// With a backoff policy the restart first waits its delay.
    pub(super) async fn restart(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        idx: usize,
        after_backoff: bool,
    ) -> Outcome {
        let id = self.children[idx].spec.id.clone();
        if !after_backoff {
            if let Some(delay) = self.backoff_delay(idx) {
                tracing::info!(supervisor = %self.id, child = %id, ?delay, "restart after backoff");
                self.children[idx].set_run(Run::Restarting, ChildStatus::Restarting);
                let msg = SupervisorMsg(Msg::Retry { id, after_backoff: true });
                myself.send_after(delay, move || msg);
                return Outcome::Continue;
            }
        }
        if !self.intensity.add_restart(Instant::now()) {
            tracing::error!(supervisor = %self.id, child = %id, "restart intensity reached: shutting down");
            metrics::counter!("ringvisor_escalations_total", "supervisor" => self.id.clone()).increment(1);
            self.emit(TreeEvent::IntensityReached { supervisor: self.id.clone(), child: id.clone() });
            return self.shutdown(myself);
        }
        // The budget just shrank: no more grants than it allows, before anything else can fail.
        self.refresh_grants();
        metrics::counter!("ringvisor_restarts_total", "supervisor" => self.id.clone(), "child" => id.clone(),
            "strategy" => self.strategy.label())
        .increment(1);
        self.emit(TreeEvent::Restarting { supervisor: self.id.clone(), child: id.clone() });
        let result = match self.strategy {
            Strategy::OneForOne | Strategy::SimpleOneForOne => match self.do_start_child(myself, idx).await {
                Ok(()) => Ok(()),
                Err(_) => {
                    self.children[idx].set_run(Run::Restarting, ChildStatus::Restarting);
                    Err(id)
                }
            },
            Strategy::RestForOne => {
                self.terminate_children(idx + 1).await;
                self.start_children(myself, idx).await
            }
            Strategy::OneForAll => {
                // The exited child is not running; every other child is stopped, then all start again.
                self.terminate_children(0).await;
                self.start_children(myself, 0).await
            }
        };
        if let Err(failed) = result {
            self.try_again_restart(myself, failed);
        }
        self.record_gauges();
        Outcome::Continue
    }

    /// `try_again_restart`: a failed restart is retried through the mailbox, so admin calls and exits queued
    /// meanwhile are handled first.
    fn try_again_restart(&self, myself: &ActorRef<SupervisorMsg>, id: String) {
        let _ = myself.send_message(SupervisorMsg(Msg::Retry { id, after_backoff: false }));
    }

    /// The backoff delay before restarting child `idx`, if it has a backoff policy (beyond OTP).
    fn backoff_delay(&mut self, idx: usize) -> Option<Duration> {
        let child = &mut self.children[idx];
        let backoff = child.spec.backoff?;
        if child.started_at.is_some_and(|t| t.elapsed() >= backoff.reset_after) {
            child.consecutive = 0;
        }
        child.consecutive += 1;
        Some(backoff.delay(child.consecutive, rand::random::<f64>()))
    }

    /// `del_child`: a child that ended and is not restarted. Temporary and dynamic children are dropped; the
    /// others keep their spec (their handles see `Stopped`), and a failed device actor is killed.
    pub(super) fn del_child(&mut self, idx: usize) {
        if self.children[idx].spec.restart == Restart::Temporary || self.strategy == Strategy::SimpleOneForOne {
            self.remove_child(idx);
            return;
        }
        let child = &mut self.children[idx];
        child.set_run(Run::Undefined, ChildStatus::Stopped);
        if let Some(actor) = &child.shared.gpu_actor {
            gpu::retire(actor, false); // the child keeps its slot
        }
    }

    /// `do_auto_shutdown`: whether significant children ending makes the supervisor shut down.
    fn do_auto_shutdown(&self) -> bool {
        match self.auto_shutdown {
            AutoShutdown::Never => false,
            AutoShutdown::AnySignificant => true,
            AutoShutdown::AllSignificant => !self.children.iter().any(|c| c.spec.significant && c.running().is_some()),
        }
    }

    /// The supervisor stops itself (intensity reached, or auto shutdown); its children stop in `post_stop`.
    fn shutdown(&mut self, myself: &ActorRef<SupervisorMsg>) -> Outcome {
        self.stopping = true;
        self.exit_reason = ExitReason::Shutdown;
        myself.stop(Some(stop_reason::SHUTDOWN.to_string()));
        Outcome::Stop
    }
}

/// A child asked to stop whose exit is still to be waited for and reported.
struct Stopping {
    idx: usize,
    how: StopHow,
    shutdown: Shutdown,
    issued: Instant,
}

/// How a stopping child's end is waited for.
enum StopHow {
    /// A ractor actor (host actor, supervisor): until it has stopped.
    Actor(ActorCell),
    /// A GPU child: until its slot has drained (or it was killed).
    Gpu(gpu::Stopping),
}

/// Asks `cell` to stop by `shutdown`: OTP's shutdown specs mapped onto ractor's stop (runs `post_stop`) and
/// kill (does not).
fn begin_shutdown(cell: &ActorCell, shutdown: Shutdown) {
    match shutdown {
        Shutdown::BrutalKill => cell.kill(),
        Shutdown::Timeout(_) | Shutdown::Infinity => cell.stop(Some(stop_reason::SHUTDOWN.to_string())),
    }
}

/// Waits for the stop [`begin_shutdown`] asked for at `issued` (killing `cell` once a shutdown timeout has
/// passed) and says how it ended.
async fn finish_shutdown(cell: &ActorCell, shutdown: Shutdown, issued: Instant) -> ExitReason {
    match shutdown {
        Shutdown::BrutalKill => {
            let _ = cell.wait(None).await;
            ExitReason::Killed
        }
        Shutdown::Timeout(limit) => match cell.wait(Some(limit.saturating_sub(issued.elapsed()))).await {
            Ok(()) => ExitReason::Shutdown,
            Err(_) => {
                let _ = cell.kill_and_wait(None).await;
                ExitReason::Killed
            }
        },
        Shutdown::Infinity => {
            let _ = cell.wait(None).await;
            ExitReason::Shutdown
        }
    }
}
