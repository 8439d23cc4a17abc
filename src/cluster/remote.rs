//! A handle on a GPU actor of another node.

use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::ActorRef;

use super::gateway::GatewayMsg;
use super::wire::Request;
use crate::supervisor::wire::{decode_answer, Refusal};
use crate::supervisor::{DeadLetterReason, DeadLetters, Origin};

/// How much longer than the call's own timeout the caller waits for the remote node's answer (the network
/// and the remote gateway's own work).
const NETWORK_SLACK: Duration = Duration::from_secs(2);

/// Errors of a call or send to an actor on another node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The node was lost (its session ended, or it was never connected) before it answered; the message is
    /// a dead letter here with reason `node_lost`.
    #[error("node `{node}` was lost before it answered: the message to `{name}` went to the dead-letter queue")]
    NodeLost {
        /// The node.
        node: String,
        /// The actor's name.
        name: String,
    },
    /// The remote node refused the call or send with the error the same call returns there.
    #[error("{message} (on node `{node}`)")]
    Refused {
        /// The node.
        node: String,
        /// The error's kind: the snake_case name of its `SendError` variant (`timeout`, `unknown_target`,
        /// `gone`, `undelivered`, `inbox_full`, `payload_too_large`, `device`), or `bad_request`.
        kind: String,
        /// Its message, as the remote node wrote it.
        message: String,
    },
    /// The reply (or a request of `send_archived` / `call_archived`) could not be encoded or decoded here as the
    /// type asked for: kind `device`, as the same call's codec error locally (`SendError::Device`).
    #[error("{message} (a reply from node `{node}`)")]
    Codec {
        /// The node.
        node: String,
        /// The codec's reason (the same text as locally).
        message: String,
    },
    /// No answer within the call's timeout (plus a network allowance).
    #[error("node `{node}` did not answer within the timeout")]
    Timeout {
        /// The node.
        node: String,
    },
}

impl RemoteError {
    /// The error's kind: `node_lost`, `timeout`, or the remote error's kind (see [`RemoteError::Refused`]).
    pub fn kind(&self) -> &str {
        match self {
            Self::NodeLost { .. } => "node_lost",
            Self::Timeout { .. } => "timeout",
            Self::Codec { .. } => "device",
            Self::Refused { kind, .. } => kind,
        }
    }
}

/// A GPU actor on another node, by name. Valid across the actor's restarts (each call is resolved by name
/// on its node); ends with [`RemoteError::NodeLost`] when its node is lost.
#[derive(Clone)]
pub struct RemoteGpuRef {
    node: String,
    name: String,
    gateway: ActorRef<GatewayMsg>,
    dead_letters: DeadLetters,
}

impl std::fmt::Debug for RemoteGpuRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteGpuRef({}@{})", self.name, self.node)
    }
}

impl RemoteGpuRef {
    pub(super) fn new(node: String, name: String, gateway: ActorRef<GatewayMsg>, dead_letters: DeadLetters) -> Self {
        Self { node, name, gateway, dead_letters }
    }

    /// The node the actor lives on.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The actor's registry name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends a message and waits up to `timeout` for the reply's payload.
    pub async fn call(&self, payload: &[u8], timeout: Duration) -> Result<Vec<u8>, RemoteError> {
        let request = Request { name: self.name.clone(), timeout, payload: payload.to_vec() }.encode();
        let answer = self.gateway.call(|p| GatewayMsg::Call(request, p), Some(timeout + NETWORK_SLACK)).await;
        self.answered(answer, payload)
    }

    /// Sends a one-way message; returns once the remote node has put it in the actor's inbox (or refused
    /// it).
    pub async fn send(&self, payload: &[u8]) -> Result<(), RemoteError> {
        let request = Request { name: self.name.clone(), timeout: Duration::ZERO, payload: payload.to_vec() }.encode();
        let answer = self.gateway.call(|p| GatewayMsg::Send(request, p), Some(NETWORK_SLACK)).await;
        self.answered(answer, payload).map(drop)
    }

    /// [`RemoteGpuRef::call`] with `#[repr(C)]` request and reply types, as [`GpuActorRef::call_typed`]: the
    /// reply must be exactly a `Resp` ([`RemoteError::Codec`] with the sizes otherwise).
    ///
    /// [`GpuActorRef::call_typed`]: crate::supervisor::GpuActorRef::call_typed
    pub async fn call_typed<Req: bytemuck::Pod, Resp: bytemuck::Pod>(
        &self,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, RemoteError> {
        let reply = self.call(bytemuck::bytes_of(request), timeout).await?;
        ringvisor_device::decode_pod(&reply).map_err(|e| self.codec(e))
    }

    /// [`RemoteGpuRef::send`] of a `#[repr(C)]` message type.
    pub async fn send_typed<Req: bytemuck::Pod>(&self, request: &Req) -> Result<(), RemoteError> {
        self.send(bytemuck::bytes_of(request)).await
    }

    /// [`RemoteGpuRef::call`] with rkyv types, as [`GpuActorRef::call_archived`]: the reply validated before it
    /// is decoded.
    ///
    /// [`GpuActorRef::call_archived`]: crate::supervisor::GpuActorRef::call_archived
    pub async fn call_archived<Req, Resp>(&self, request: &Req, timeout: Duration) -> Result<Resp, RemoteError>
    where
        Req: ringvisor_device::Archivable,
        Resp: ringvisor_device::Unarchivable,
    {
        let bytes = ringvisor_device::archive(request).map_err(|e| self.codec(e))?;
        let reply = self.call(&bytes, timeout).await?;
        ringvisor_device::decode_archived(&reply).map_err(|e| self.codec(e))
    }

    /// [`RemoteGpuRef::send`] of a host-side type archived with rkyv.
    pub async fn send_archived<Req: ringvisor_device::Archivable>(&self, request: &Req) -> Result<(), RemoteError> {
        let bytes = ringvisor_device::archive(request).map_err(|e| self.codec(e))?;
        self.send(&bytes).await
    }

    fn codec(&self, e: ringvisor_device::DeviceError) -> RemoteError {
        let message = match e {
            ringvisor_device::DeviceError::Codec(m) => m,
            other => other.to_string(),
        };
        RemoteError::Codec { node: self.node.clone(), message }
    }

    /// A remote answer as a result; a lost node makes the message a dead letter here.
    fn answered<E>(&self, answer: Result<CallResult<Vec<u8>>, E>, payload: &[u8]) -> Result<Vec<u8>, RemoteError> {
        let bytes = match answer {
            Ok(CallResult::Success(bytes)) => bytes,
            Ok(CallResult::Timeout) => return Err(RemoteError::Timeout { node: self.node.clone() }),
            Ok(CallResult::SenderError) | Err(_) => {
                self.dead_letters.push(
                    DeadLetterReason::NodeLost,
                    Origin::Host,
                    Some(format!("{}@{}", self.name, self.node)),
                    None,
                    payload.to_vec(),
                );
                return Err(RemoteError::NodeLost { node: self.node.clone(), name: self.name.clone() });
            }
        };
        let refused = |kind: String, message: String| RemoteError::Refused { node: self.node.clone(), kind, message };
        match decode_answer(&bytes) {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(Refusal { kind, message })) => Err(refused(kind, message)),
            Err(why) => Err(refused("bad_request".into(), why)),
        }
    }
}
