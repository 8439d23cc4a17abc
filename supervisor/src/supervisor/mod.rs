//! The supervisor: a ractor actor that keeps its own ordered child list and applies OTP's supervisor
//! semantics to it (strategies, restart types, intensity, shutdown specs, significant children, the admin
//! API).
//!
//! - this file: the actor (OTP's `init`, `handle_call` / `handle_info`, `terminate`) and its state;
//! - `state_machine.rs`: `supervisor.erl`'s decisions, one function each, named as there;
//! - `children.rs`: the child table (a child's run state and its handles' status change together);
//! - `admin.rs`: the admin API's handlers and their OTP errors;
//! - `grants.rs`: which GPU children let block 0 restart them in place (restart grants);
//! - `client.rs`: [`SupervisorRef`], the messages it sends, and the answer types.

mod admin;
mod children;
mod client;
mod grants;
mod state_machine;

pub use client::{ChildCount, ChildInfo, SupervisorMsg, SupervisorRef};

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use children::Child;
use client::Msg;

use crate::error::SupervisorError;
use crate::gpu;
use crate::intensity::Intensity;
use crate::policy::{AutoShutdown, Strategy};
use crate::reason::ExitReason;
use crate::services::Services;
use crate::slots::NoticeSink;
use crate::spec::{ChildSpec, SupervisorSpec};
use crate::status::Run;
use crate::tree_events::TreeEvent;

/// The supervisor actor. Start a tree with [`SupervisorRef::start`].
pub struct Supervisor;

/// Arguments of a supervisor actor.
pub struct SupervisorArgs {
    id: String,
    spec: SupervisorSpec,
    services: Services,
    root: bool,
}

impl SupervisorArgs {
    /// The root of a tree (it reports its own stop).
    pub(crate) fn root(id: String, spec: SupervisorSpec, services: Services) -> Self {
        Self { id, spec, services, root: true }
    }

    /// A supervisor started as a child of another (its parent reports its stop).
    pub(crate) fn nested(id: String, spec: SupervisorSpec, services: Services) -> Self {
        Self { id, spec, services, root: false }
    }
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
    /// Where the notices of this supervisor's GPU children go: its own mailbox.
    notices: NoticeSink,
    /// During a group start: the children whose mirrors are spawned together once the group has started.
    deferred_mirrors: Option<Vec<usize>>,
    /// Whether its GPU children are mirrored unless they say (`SupervisorSpec::mirrored`, resolved).
    mirrored: bool,
}

/// What a restart decided.
#[derive(PartialEq, Eq)]
enum Outcome {
    Continue,
    /// The supervisor is shutting down (intensity exceeded or auto_shutdown).
    Stop,
}

/// A supervisor killed without cleanup (ractor `kill`: no `post_stop`) still releases what its children
/// hold: their device actors are killed, their handles see `Gone`, their names and slots are released. (After
/// a normal stop the child list is already empty.)
impl Drop for SupervisorState {
    fn drop(&mut self) {
        for mut child in std::mem::take(&mut self.children) {
            if let Some(cell) = child.take_running().as_ref().and_then(|i| i.actor()) {
                cell.kill();
            }
            let taken_over = child.shared.gpu_actor.as_ref().is_some_and(gpu::abandon);
            self.retire_keeping_slot(child, taken_over);
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
        tracing::info!(supervisor = %id, strategy = spec.strategy.label(), "supervisor starting");
        let mailbox = myself.clone();
        let notices: NoticeSink = Arc::new(move |notice| {
            let _ = mailbox.send_message(SupervisorMsg(Msg::Slot(notice)));
        });
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
            notices,
            deferred_mirrors: None,
            mirrored: spec.mirrored.unwrap_or(crate::spec::MIRRORED_BY_DEFAULT),
        };
        if spec.strategy == Strategy::SimpleOneForOne {
            state.template = spec.children.into_iter().next();
            return Ok(state);
        }
        if let Err((child_id, reason)) = state.init_children(&myself, spec.children).await {
            state.terminate_and_drop_children().await;
            let exit = ExitReason::ShutdownWith(format!("failed_to_start_child {child_id}"));
            state.emit(TreeEvent::SupervisorStopped { supervisor: state.id.clone(), reason: exit, root });
            // The same words as `SupervisorError::StartFailed` (which `SupervisorError::below` reads back).
            return Err(SupervisorError::StartFailed { id: child_id, reason }.to_string().into());
        }
        state.record_gauges();
        state.refresh_grants();
        Ok(state)
    }

    /// OTP `handle_call` (the admin API) and `handle_info` (`try_again_restart`).
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
            Msg::Slot(notice) => {
                // A notice about an incarnation already replaced or stopped by us is stale: ignore it.
                let found = state.children.iter().position(|c| c.runs_gpu_incarnation(&notice));
                if let Some(idx) = found {
                    if let Some(reason) = gpu::exit_reason(&state.children[idx].shared, notice) {
                        state.restart_child(&myself, idx, reason).await;
                    }
                }
            }
        }
        state.refresh_grants();
        Ok(())
    }

    /// OTP `handle_info({'EXIT', ...})`: a child exited.
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
        // Only exits matter (ractor also reports every child's start: a tree of 100,000 gets 100,000 of those).
        let Some((actor_id, reason)) = ExitReason::from_event(&event) else { return Ok(()) };
        // An exit of an incarnation already replaced or terminated by us is stale: ignore it.
        let runs = |c: &Child| c.running().and_then(|i| i.actor()).is_some_and(|a| a.get_id() == actor_id);
        if let Some(idx) = state.children.iter().position(runs) {
            state.restart_child(&myself, idx, reason).await;
        }
        state.refresh_grants();
        Ok(())
    }

    /// OTP `terminate`: children stop in reverse start order, then the supervisor reports its own exit.
    async fn post_stop(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        state.terminate_and_drop_children().await;
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
