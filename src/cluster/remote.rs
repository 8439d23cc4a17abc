//! A handle on a GPU actor of another node.

use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::ActorRef;

use super::gateway::GatewayMsg;
use super::wire::{Answer, Request};
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
        match Answer::decode(&bytes) {
            Ok(Answer::Ok(reply)) => Ok(reply),
            Ok(Answer::Err { kind, message }) => Err(RemoteError::Refused { node: self.node.clone(), kind, message }),
            Err(why) => Err(RemoteError::Refused { node: self.node.clone(), kind: "bad_request".into(), message: why }),
        }
    }
}
