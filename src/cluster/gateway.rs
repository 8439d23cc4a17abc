//! A node's gateway: the one ractor actor per runtime that other nodes reach through ractor_cluster. It
//! answers lookups from its registry and runs calls and sends to its GPU actors by name, so a remote handle
//! names an actor, not an incarnation, and stays valid across the actor's restarts like a local handle.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster::RactorClusterMessage;

use super::wire::{encode_names, Request};
use crate::supervisor::wire::encode_answer;
use crate::supervisor::{SendError, Services};

/// The process group every node's gateway joins; ractor_cluster keeps its membership in step across the
/// connected nodes (a lost node's gateway leaves it).
pub(crate) const GATEWAYS: &str = "ringvisor.gateways";

/// What a gateway answers. Every field is bytes or text (ractor_cluster carries them); see `wire`.
#[derive(RactorClusterMessage)]
pub enum GatewayMsg {
    /// The node's name.
    #[rpc]
    Hello(RpcReplyPort<String>),
    /// The names matching a glob pattern, `kind name` per line.
    #[rpc]
    Find(String, RpcReplyPort<String>),
    /// A call to a named GPU actor: an encoded `Request`, answered with an encoded `Answer`.
    #[rpc]
    Call(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// A one-way send to a named GPU actor: an encoded `Request`, answered with an encoded `Answer` (empty
    /// payload once the message is in the actor's inbox).
    #[rpc]
    Send(Vec<u8>, RpcReplyPort<Vec<u8>>),
}

/// The gateway actor.
pub(crate) struct Gateway;

/// Its state: the node's name and the runtime's services.
pub(crate) struct GatewayState {
    node: String,
    services: Services,
}

impl Actor for Gateway {
    type Msg = GatewayMsg;
    type State = GatewayState;
    type Arguments = (String, Services);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (node, services): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        ractor::pg::join(GATEWAYS.to_string(), vec![myself.get_cell()]);
        Ok(GatewayState { node, services })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            GatewayMsg::Hello(reply) => {
                let _ = reply.send(state.node.clone());
            }
            GatewayMsg::Find(pattern, reply) => {
                let found = state.services.registry().find(&pattern).unwrap_or_default();
                let _ =
                    reply.send(encode_names(found.iter().map(|(name, child)| (name.as_str(), child.gpu().is_some()))));
            }
            // A call waits for its actor: it runs beside the gateway, which goes on serving other requests.
            GatewayMsg::Call(bytes, reply) => {
                let services = state.services.clone();
                tokio::spawn(async move {
                    let answer = match Request::decode(&bytes) {
                        Ok(req) => match services.call(&req.name, &req.payload, req.timeout).await {
                            Ok(r) => r.payload().map(<[u8]>::to_vec).map_err(SendError::Device),
                            Err(e) => Err(e),
                        },
                        Err(why) => Err(bad_request(why)),
                    };
                    let _ = reply.send(encode_answer(&answer));
                });
            }
            GatewayMsg::Send(bytes, reply) => {
                let answer = match Request::decode(&bytes) {
                    Ok(req) => state.services.send(&req.name, &req.payload).map(|()| Vec::new()),
                    Err(why) => Err(bad_request(why)),
                };
                let _ = reply.send(encode_answer(&answer));
            }
        }
        Ok(())
    }
}

/// A request that is not one: the caller reads kind `bad_request`.
fn bad_request(why: String) -> SendError {
    SendError::Remote { kind: "bad_request".into(), message: why }
}
