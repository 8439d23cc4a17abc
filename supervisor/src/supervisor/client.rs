//! The client side of a supervisor: [`SupervisorRef`] (OTP's admin API: `start_child`, `terminate_child`,
//! `restart_child`, `delete_child`, `which_children`, `count_children`, `get_childspec`), the messages it
//! sends, and the types of its answers.

use ractor::{Actor, ActorRef, RpcReplyPort};

use super::{Supervisor, SupervisorArgs};
use crate::child::spawn_error;
use crate::error::SupervisorError;
use crate::handle::ChildRef;
use crate::policy::ChildType;
use crate::reason::stop_reason;
use crate::services::Services;
use crate::slots::SlotNotice;
use crate::spec::{ChildSpec, SupervisorSpec};
use crate::status::RunState;

pub(super) type Reply<T> = RpcReplyPort<Result<T, SupervisorError>>;

/// A message to a supervisor. Use [`SupervisorRef`]'s methods rather than building these.
pub struct SupervisorMsg(pub(super) Msg);

// Under ractor's `cluster` feature no type is a message by default; a supervisor's messages never leave its
// process (the default methods: not serializable).
#[cfg(feature = "cluster")]
impl ractor::Message for SupervisorMsg {}

pub(super) enum Msg {
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
    /// About a GPU child's incarnation (its end, mostly), from the device's event path or the watchdog.
    Slot(SlotNotice),
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
        Self::start_validated(id, spec, services).await
    }

    /// [`SupervisorRef::start`] for a spec its caller has just checked with [`SupervisorSpec::validate`]
    /// (the runtime checks the user's tree, then starts it below its own top supervisor: a tree of 100,000
    /// children takes tens of milliseconds to check, so it is checked once).
    #[doc(hidden)]
    pub async fn start_validated(
        id: impl Into<String>,
        spec: SupervisorSpec,
        services: Services,
    ) -> Result<Self, SupervisorError> {
        let id = id.into();
        let args = SupervisorArgs::root(id.clone(), spec, services);
        match Supervisor::spawn(None, Supervisor, args).await {
            Ok((actor, _)) => Ok(Self { actor }),
            Err(e) => Err(SupervisorError::StartFailed { id, reason: spawn_error(e) }),
        }
    }

    /// A handle on a nested supervisor from its child handle (its current incarnation).
    pub fn from_child(child: &ChildRef) -> Option<Self> {
        if child.gpu().is_some() {
            return None; // its actor is a mirror, never a supervisor
        }
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
    /// [`StartContext::args`](crate::StartContext::args) of a host actor.
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
