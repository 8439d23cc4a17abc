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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ractor::Actor;

    use super::*;
    use crate::device::{DeviceConfig, SlotFault};
    use crate::prelude::*;
    use crate::supervisor::wire::decode_answer;

    /// Long enough that no call here ends by its deadline on a loaded machine; only a failure waits for it.
    const T: Duration = Duration::from_secs(60);

    /// A call through the gateway, as a peer's would arrive: the decoded answer.
    async fn call(gateway: &ActorRef<GatewayMsg>, name: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let request = Request { name: name.into(), timeout: T, payload: payload.to_vec() }.encode();
        let bytes =
            gateway.call(|p| GatewayMsg::Call(request, p), Some(T * 2)).await.expect("gateway").expect("answered");
        decode_answer(&bytes).expect("an answer").map_err(|refusal| format!("{refusal:?}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_waits_does_not_hold_up_the_gateway() {
        let spec = SupervisorSpec::new(Strategy::OneForOne)
            // (no watchdog: the stall lasts until the test clears it, however slow the machine)
            .child(ChildSpec::gpu("slow", GpuChild::new("echo").heartbeat_timeout(None)).name("g/slow"))
            .child(ChildSpec::gpu("fast", GpuChild::new("counter")).name("g/fast"));
        let rt = crate::Runtime::start(DeviceConfig::default().slots(4), spec).await.unwrap();
        let (gateway, handle) = Actor::spawn(None, Gateway, ("n".into(), rt.services().clone())).await.unwrap();

        // The slow actor makes no progress until its stall is cleared: a call to it waits.
        let slow = rt.gpu("g/slow").unwrap();
        rt.device().inject(slow.slot(), SlotFault::Stall).unwrap();
        let waiting = tokio::spawn({
            let gateway = gateway.clone();
            async move { call(&gateway, "g/slow", b"hello").await }
        });
        // the call is in the stalled actor's inbox: the gateway has taken it and waits for its answer
        let since = std::time::Instant::now();
        while rt.device().inbox_pending(slow.slot()).unwrap() == 0 {
            assert!(since.elapsed() < T, "the call to the stalled actor never reached its inbox");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }

        // Meanwhile the gateway answers others: calls, a lookup.
        for (delta, total) in [(5i64, 5i64), (7, 12)] {
            let reply = call(&gateway, "g/fast", &delta.to_le_bytes()).await.unwrap();
            assert_eq!(i64::from_le_bytes(reply[..8].try_into().unwrap()), total);
        }
        let found = gateway.call(|p| GatewayMsg::Find("g/*".into(), p), Some(T)).await.unwrap().unwrap();
        assert_eq!(found, "g g/fast\ng g/slow\n");
        assert!(!waiting.is_finished(), "the stalled actor's call ended before its stall did");

        // Its stall cleared, the waiting call is answered.
        rt.device().inject(slow.slot(), SlotFault::ClearStall).unwrap();
        assert_eq!(waiting.await.unwrap().unwrap(), b"hello");
        gateway.stop(None);
        handle.await.unwrap();
        rt.shutdown().await;
    }
}
