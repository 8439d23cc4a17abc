//! A mirror's messages across processes (ractor's `cluster` feature): [`GpuMessage`] is a ractor_cluster message
//! like one derived with `RactorClusterMessage`, so another node reaches a mirrored GPU actor through ractor's own
//! remote actors (found in a `pg` group its node shares), with `call!` and `cast!` as locally. The payload
//! crosses as it is; a reply crosses as [`crate::wire`]'s answer, so an error arrives as
//! [`SendError::Remote`](crate::SendError::Remote) with its kind and message. The supervisor's own
//! `Ended` never leaves its process: a remote node cannot end an incarnation's mirror by message.

use ractor::concurrency::{oneshot, Duration};
use ractor::message::{BoxedDowncastErr, SerializedMessage};
use ractor::RpcReplyPort;

use super::GpuMessage;
use crate::error::SendError;
use crate::wire::{decode_answer, encode_answer};

/// The variant names on the wire.
const CALL: &str = "Call";
const CAST: &str = "Cast";
const STATE: &str = "State";

impl ractor::Message for GpuMessage {
    fn serializable() -> bool {
        true
    }

    fn serialize(self) -> Result<SerializedMessage, BoxedDowncastErr> {
        let call = |variant: &str, args: Vec<u8>, reply| SerializedMessage::Call {
            variant: variant.to_string(),
            args,
            reply: bytes_port(reply),
            metadata: None,
        };
        match self {
            GpuMessage::Call(payload, reply) => Ok(call(CALL, payload, reply)),
            GpuMessage::State(reply) => Ok(call(STATE, Vec::new(), reply)),
            GpuMessage::Cast(payload) => {
                Ok(SerializedMessage::Cast { variant: CAST.to_string(), args: payload, metadata: None })
            }
            GpuMessage::Ended(_) => Err(BoxedDowncastErr),
        }
    }

    fn deserialize(message: SerializedMessage) -> Result<Self, BoxedDowncastErr> {
        match message {
            SerializedMessage::Call { variant, args, reply, .. } if variant == CALL => {
                Ok(GpuMessage::Call(args, typed_port(reply)))
            }
            SerializedMessage::Call { variant, reply, .. } if variant == STATE => {
                Ok(GpuMessage::State(typed_port(reply)))
            }
            SerializedMessage::Cast { variant, args, .. } if variant == CAST => Ok(GpuMessage::Cast(args)),
            _ => Err(BoxedDowncastErr),
        }
    }
}

/// The caller's side: a port for the answer's bytes, decoded into `reply` when they arrive (undecodable bytes
/// are an error answer, never a panic). Lives as long as `reply`'s timeout, if it has one.
fn bytes_port(reply: RpcReplyPort<Result<Vec<u8>, SendError>>) -> RpcReplyPort<Vec<u8>> {
    let (tx, rx) = oneshot::<Vec<u8>>();
    let timeout = reply.get_timeout();
    ractor::concurrency::spawn(async move {
        if let Some(Ok(bytes)) = within(timeout, rx).await {
            let answer = match decode_answer(&bytes) {
                Ok(answer) => answer.map_err(SendError::from),
                Err(why) => Err(SendError::Remote { kind: "bad_answer".into(), message: why }),
            };
            let _ = reply.send(answer);
        }
    });
    port(tx, timeout)
}

/// The mirror's side: a typed port whose answer is encoded into `reply`, the bytes the session sends back.
fn typed_port(reply: RpcReplyPort<Vec<u8>>) -> RpcReplyPort<Result<Vec<u8>, SendError>> {
    let (tx, rx) = oneshot::<Result<Vec<u8>, SendError>>();
    let timeout = reply.get_timeout();
    ractor::concurrency::spawn(async move {
        if let Some(Ok(answer)) = within(timeout, rx).await {
            let _ = reply.send(encode_answer(&answer));
        }
    });
    port(tx, timeout)
}

/// `rx`'s value, waited for up to `timeout` (`None`: it did not come in time).
async fn within<T>(timeout: Option<Duration>, rx: ractor::concurrency::OneshotReceiver<T>) -> Option<Result<T, ()>> {
    let received = match timeout {
        Some(t) => ractor::concurrency::timeout(t, rx).await.ok()?,
        None => rx.await,
    };
    Some(received.map_err(drop))
}

fn port<T>(tx: ractor::concurrency::OneshotSender<T>, timeout: Option<Duration>) -> RpcReplyPort<T> {
    match timeout {
        Some(t) => RpcReplyPort::from((tx, t)),
        None => RpcReplyPort::from(tx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ractor::Message;

    #[tokio::test]
    async fn a_call_crosses_as_bytes_and_its_answer_comes_back_typed() {
        let (tx, rx) = oneshot();
        let message = GpuMessage::Call(vec![1, 2, 3], RpcReplyPort::from((tx, Duration::from_secs(5))));
        let SerializedMessage::Call { variant, args, reply, .. } = message.serialize().expect("serializable") else {
            panic!("a call crosses as a call");
        };
        assert_eq!((variant.as_str(), args.as_slice()), (CALL, &[1u8, 2, 3][..]));
        assert_eq!(reply.get_timeout(), Some(Duration::from_secs(5)));
        // the mirror's node: the bytes become a GpuMessage again, answered with a typed error
        let (tx2, rx2) = oneshot();
        let wire = SerializedMessage::Call { variant, args: vec![4], reply: RpcReplyPort::from(tx2), metadata: None };
        let GpuMessage::Call(payload, typed) = GpuMessage::deserialize(wire).expect("a call") else {
            panic!("a call arrives as a call");
        };
        assert_eq!(payload, vec![4]);
        typed.send(Err(SendError::InboxFull)).unwrap();
        let bytes = rx2.await.expect("the answer's bytes");
        // the caller's node: the bytes decoded into the caller's typed port
        reply.send(bytes).unwrap();
        match rx.await.expect("the typed answer") {
            Err(SendError::Remote { kind, message }) => {
                assert_eq!(kind, "inbox_full");
                assert_eq!(message, SendError::InboxFull.to_string());
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn casts_and_state_reads_cross_and_the_supervisors_end_does_not() {
        let SerializedMessage::Cast { variant, args, .. } = GpuMessage::Cast(vec![7]).serialize().unwrap() else {
            panic!("a cast crosses as a cast");
        };
        let back = GpuMessage::deserialize(SerializedMessage::Cast { variant, args, metadata: None }).unwrap();
        assert!(matches!(back, GpuMessage::Cast(p) if p == vec![7]));
        let (tx, _rx) = oneshot();
        let state = GpuMessage::State(RpcReplyPort::from(tx)).serialize().unwrap();
        assert!(matches!(GpuMessage::deserialize(state), Ok(GpuMessage::State(_))));
        assert!(GpuMessage::Ended(None).serialize().is_err());
        let unknown = SerializedMessage::Cast { variant: "Ended".into(), args: vec![], metadata: None };
        assert!(GpuMessage::deserialize(unknown).is_err());
    }

    #[tokio::test]
    async fn an_answer_that_is_not_one_is_an_error_answer() {
        let (tx, rx) = oneshot();
        let bytes = bytes_port(RpcReplyPort::from(tx));
        bytes.send(vec![9, 9]).unwrap();
        match rx.await.unwrap() {
            Err(SendError::Remote { kind, .. }) => assert_eq!(kind, "bad_answer"),
            other => panic!("{other:?}"),
        }
    }
}
