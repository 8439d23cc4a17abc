//! The design card's mirror: a ractor actor for each incarnation of a mirrored GPU child
//! ([`GpuChild::mirrored`](crate::GpuChild::mirrored)), so that code written for ractor actors reaches a GPU actor:
//! it holds an `ActorRef<GpuMessage>`, `call!`s and `cast!`s it (answered from the device), links to it or
//! monitors it, finds it in ractor's registry (`ractor::registry::where_is`) and `pg` groups.
//!
//! A mirror lives as long as its incarnation, as an OTP process does: it is spawned when the incarnation starts
//! (a registered or grouped mirror, which ractor code may look for at any moment) or when it is first asked for
//! (one only its child's handle finds), and the supervisor ends it when the incarnation ends, failing it with the
//! exit reason after a crash (whoever is linked to it sees `SupervisionEvent::ActorFailed`) or stopping it after
//! a stop. The next
//! incarnation gets a mirror of its own: a new `ActorRef`, registered under the same name and joining the same
//! groups, as a restarted OTP child has a new pid under the same registered name. The messages go through the
//! child's stable [`GpuActorRef`], so the mirror adds a mailbox hop, never a second path to the device.

#[cfg(feature = "cluster")]
mod remote;

use std::sync::Arc;
use std::time::Duration;

use ractor::actor::ActorRuntime;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::child::MirrorSpec;
use crate::error::SendError;
use crate::handle::{ChildShared, GpuActorRef, MirrorSlot};
use crate::sync::lock;

/// How long a mirror waits for the device's answer to a [`GpuMessage::Call`] or [`GpuMessage::State`].
pub const MIRROR_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A message to a mirrored GPU actor ([`GpuChild::mirrored`](crate::GpuChild::mirrored)).
pub enum GpuMessage {
    /// A call: the payload, answered with the behaviour's reply payload (`ractor::call!(mirror,
    /// GpuMessage::Call, payload)`), within [`MIRROR_CALL_TIMEOUT`].
    Call(Vec<u8>, RpcReplyPort<Result<Vec<u8>, SendError>>),
    /// A one-way message (`ractor::cast!`).
    Cast(Vec<u8>),
    /// A copy of the actor's state, taken between two messages (as `GpuActorRef::state`).
    State(RpcReplyPort<Result<Vec<u8>, SendError>>),
    /// The incarnation ended (sent by the supervisor only): the mirror fails with the reason, or stops.
    #[doc(hidden)]
    Ended(Option<String>),
}

/// The mirror actor.
struct GpuMirror;

struct MirrorArgs {
    handle: GpuActorRef,
    groups: Vec<String>,
}

impl Actor for GpuMirror {
    type Msg = GpuMessage;
    type State = GpuActorRef;
    type Arguments = MirrorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<GpuMessage>,
        args: MirrorArgs,
    ) -> Result<GpuActorRef, ActorProcessingErr> {
        for group in args.groups {
            ractor::pg::join(group, vec![myself.get_cell()]);
        }
        Ok(args.handle)
    }

    async fn handle(
        &self,
        myself: ActorRef<GpuMessage>,
        message: GpuMessage,
        handle: &mut GpuActorRef,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            GpuMessage::Call(payload, reply) => {
                // answered from a task of its own, so the mailbox is never held by a wait for the device (the end
                // of the incarnation comes through it, and a call may wait for the next incarnation)
                let handle = handle.clone();
                tokio::spawn(async move {
                    // the behaviour's error answer is an error here too (`SendError::Device(ErrorReply)`)
                    let answer = match handle.call(&payload, MIRROR_CALL_TIMEOUT).await {
                        Ok(reply) => reply.payload().map(<[u8]>::to_vec).map_err(SendError::from),
                        Err(e) => Err(e),
                    };
                    let _ = reply.send(answer);
                });
            }
            GpuMessage::Cast(payload) => {
                // a message the child does not take is a dead letter with its reason (as for the handle's send)
                let _ = handle.send(&payload);
            }
            GpuMessage::State(reply) => {
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = reply.send(handle.state(MIRROR_CALL_TIMEOUT).await);
                });
            }
            GpuMessage::Ended(Some(reason)) => return Err(reason.into()),
            GpuMessage::Ended(None) => myself.stop(None),
        }
        Ok(())
    }
}

impl ChildShared {
    /// The running incarnation's mirror (`mirror`): the child's actor from now on.
    fn set_mirror(&self, mirror: ActorRef<GpuMessage>, slot: &mut MirrorSlot) {
        *lock(&self.actor) = Some(mirror.get_cell());
        slot.last = Some(mirror.get_cell());
        slot.on_demand = None;
        if let Some(previous) = slot.running.replace(mirror.get_cell()) {
            end(previous, None);
        }
    }

    /// The running incarnation's mirror, spawned by the supervisor.
    pub(crate) fn set_spawned_mirror(&self, mirror: ActorRef<GpuMessage>) {
        self.set_mirror(mirror, &mut lock(&self.mirror));
    }

    /// The running incarnation's mirror is to be spawned when first asked for (on the supervisor's runtime).
    pub(crate) fn mirror_on_demand(&self) {
        lock(&self.mirror).on_demand = tokio::runtime::Handle::try_current().ok();
    }

    /// Ends the running incarnation's mirror, if any: fails it with `failure`, or stops it. One not spawned yet
    /// never will be.
    pub(crate) fn end_mirror(&self, failure: Option<String>) {
        let running = {
            let mut slot = lock(&self.mirror);
            slot.on_demand = None;
            slot.running.take()
        };
        if let Some(mirror) = running {
            end(mirror, failure);
        }
    }

    /// The child's last mirror (running, or ended and perhaps still on its way out).
    pub(crate) fn last_mirror(&self) -> Option<ActorCell> {
        lock(&self.mirror).last.clone()
    }

    /// The running incarnation's actor; for a GPU child whose mirror is spawned on demand, the mirror,
    /// spawned now if it is not yet (once: later calls get the same one).
    pub(crate) fn actor_or_mirror(self: &Arc<Self>) -> Option<ActorCell> {
        if let Some(actor) = self.actor() {
            return Some(actor);
        }
        let mut slot = lock(&self.mirror);
        let Some(runtime) = slot.on_demand.take() else {
            drop(slot);
            return self.actor(); // none, or spawned meanwhile by another caller
        };
        let args = MirrorArgs { handle: GpuActorRef { shared: self.clone() }, groups: Vec::new() };
        let _entered = runtime.enter();
        match ActorRuntime::spawn_instant(None, GpuMirror, args) {
            Ok((mirror, _)) => {
                let cell = mirror.get_cell();
                self.set_mirror(mirror, &mut slot);
                Some(cell)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the mirror could not be spawned: the child runs without one");
                None
            }
        }
    }
}

/// Ends a mirror: fails it with `failure`, or stops it.
fn end(mirror: ActorCell, failure: Option<String>) {
    let _ = ActorRef::<GpuMessage>::from(mirror).cast(GpuMessage::Ended(failure));
}

impl GpuActorRef {
    /// The running incarnation's mirror, for a child mirrored by a ractor actor
    /// ([`GpuChild::mirrored`](crate::GpuChild::mirrored)); `None` while the child is down, and for a child
    /// that is not mirrored. Each incarnation has its own (see [`GpuMessage`]).
    pub fn mirror(&self) -> Option<ActorRef<GpuMessage>> {
        self.actor_cell().map(ActorRef::from)
    }
}

/// How long a new mirror waits for the previous one of its child to leave its name.
const NAME_HANDOVER: Duration = Duration::from_secs(1);

/// Spawns the mirror of the incarnation of `handle`'s child that just started: named `name` in ractor's
/// registry if the spec asks for it, in the spec's groups. The name held by `previous` (the child's last mirror,
/// ended and on its way out) is waited for; held by another actor, the mirror runs unnamed (with a warning).
pub(crate) async fn spawn(
    handle: GpuActorRef,
    name: Option<String>,
    spec: &MirrorSpec,
    previous: Option<ActorCell>,
) -> Option<ActorRef<GpuMessage>> {
    let args = || MirrorArgs { handle: handle.clone(), groups: spec.groups.clone() };
    let named = name.filter(|_| spec.registered);
    let mut spawned = Actor::spawn(named.clone(), GpuMirror, args()).await;
    for _ in 0..2 {
        if !matches!(spawned, Err(ractor::SpawnErr::ActorAlreadyRegistered(_))) {
            break;
        }
        match (named.clone().and_then(ractor::registry::where_is), &previous) {
            (None, _) => {} // released since: try again
            (Some(holder), Some(previous)) if holder.get_id() == previous.get_id() => {
                let _ = previous.wait(Some(NAME_HANDOVER)).await;
            }
            _ => break, // another actor's
        }
        spawned = Actor::spawn(named.clone(), GpuMirror, args()).await;
    }
    if let Err(ractor::SpawnErr::ActorAlreadyRegistered(taken)) = &spawned {
        tracing::warn!(name = %taken, "the mirror's name is held by another ractor actor: the mirror runs unnamed");
        spawned = Actor::spawn(None, GpuMirror, args()).await;
    }
    match spawned {
        Ok((mirror, _)) => Some(mirror),
        Err(e) => {
            tracing::warn!(error = %e, "the mirror could not be spawned: the child runs without one");
            None
        }
    }
}
