//! The bytes of an answer that crosses a process boundary: a mirrored GPU actor's reply to a
//! [`GpuMessage`](crate::GpuMessage) from another node (over ractor_cluster), and the cluster gateway's
//! answers. Decoded with errors, never with a panic: a peer that sends garbage gets an error, not a crash.

use crate::error::SendError;

/// `[0][payload]` for a reply, `[1][kind length: u32 LE][kind][message]` for an error (its
/// [`SendError::kind`] and its text).
pub fn encode_answer(answer: &Result<Vec<u8>, SendError>) -> Vec<u8> {
    match answer {
        Ok(payload) => [&[0u8][..], payload].concat(),
        Err(e) => {
            let (kind, message) = (e.kind(), remote_message(e));
            let mut out = Vec::with_capacity(5 + kind.len() + message.len());
            out.push(1u8);
            out.extend_from_slice(&(kind.len() as u32).to_le_bytes());
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(message.as_bytes());
            out
        }
    }
}

/// An error as it crossed a process: the kind of its [`SendError`] variant there ([`SendError::kind`]) and its
/// message. A mirror's caller reads it as [`SendError::Remote`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The variant's kind.
    pub kind: String,
    /// Its message, as the other process wrote it.
    pub message: String,
}

impl From<Refusal> for SendError {
    fn from(Refusal { kind, message }: Refusal) -> Self {
        SendError::Remote { kind, message }
    }
}

/// The inverse of [`encode_answer`]: a reply, or the error with its kind and message. `Err` says why the bytes
/// are not an answer.
pub fn decode_answer(bytes: &[u8]) -> Result<Result<Vec<u8>, Refusal>, String> {
    match bytes.first() {
        Some(0) => Ok(Ok(bytes[1..].to_vec())),
        Some(1) => {
            let short = || "answer shorter than its header".to_string();
            let len = u32::from_le_bytes(bytes.get(1..5).ok_or_else(short)?.try_into().map_err(|_| short())?);
            let end = 5usize.checked_add(len as usize).ok_or_else(short)?;
            let kind = bytes.get(5..end).ok_or_else(short)?;
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            Ok(Err(Refusal { kind: text(kind), message: text(&bytes[end..]) }))
        }
        _ => Err("answer with an unknown tag".to_string()),
    }
}

/// An error's text as it crosses: a remote error's own message (not wrapped again in "on another node").
fn remote_message(e: &SendError) -> String {
    match e {
        SendError::Remote { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(answer: Result<Vec<u8>, SendError>) -> Result<Vec<u8>, SendError> {
        decode_answer(&encode_answer(&answer)).expect("an answer").map_err(SendError::from)
    }

    #[test]
    fn replies_and_errors_round_trip_with_their_kind_and_text() {
        assert_eq!(round_trip(Ok(vec![9, 8, 7])).unwrap(), vec![9, 8, 7]);
        assert_eq!(round_trip(Ok(Vec::new())).unwrap(), Vec::<u8>::new());
        let sent = SendError::PayloadTooLarge { len: 5000, max: 96 };
        let text = sent.to_string();
        match round_trip(Err(sent)) {
            Err(SendError::Remote { kind, message }) => {
                assert_eq!(kind, "payload_too_large");
                assert_eq!(message, text);
            }
            other => panic!("not a remote error: {other:?}"),
        }
        // an error that crossed once crosses again unchanged
        let once = SendError::Remote { kind: "timeout".into(), message: "no reply within the timeout".into() };
        match round_trip(Err(once)) {
            Err(e @ SendError::Remote { .. }) => {
                assert_eq!(e.kind(), "timeout");
                assert_eq!(e.to_string(), "no reply within the timeout (on another node)");
            }
            other => panic!("not a remote error: {other:?}"),
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_answer(&[]).is_err());
        assert!(decode_answer(&[7, 1, 2]).is_err());
        assert!(decode_answer(&[1, 255, 255, 0, 0]).is_err());
        assert!(decode_answer(&[1, 255, 255, 255, 255]).is_err());
        assert!(decode_answer(&[1, 2]).is_err());
    }
}
