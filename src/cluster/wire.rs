//! The bytes of the gateway's requests and lookups (its answers to calls and sends are
//! `ringvisor_supervisor::wire`'s, as a mirror's). ractor_cluster carries a message's fields as bytes
//! (`BytesConvertable`); these are ours, decoded with errors, never with a panic: a peer that sends garbage
//! gets a refusal, not a crashed gateway.

use std::time::Duration;

/// A call or send to a named actor on the node that receives it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// The registry name of the target.
    pub name: String,
    /// How long the target's node may wait for the reply (0 for a send).
    pub timeout: Duration,
    /// The message.
    pub payload: Vec<u8>,
}

impl Request {
    /// `[timeout ms: u64 LE][name length: u32 LE][name][payload]`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.name.len() + self.payload.len());
        out.extend_from_slice(&(self.timeout.as_millis().min(u128::from(u64::MAX)) as u64).to_le_bytes());
        out.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let short = || "request shorter than its header".to_string();
        let timeout = u64::from_le_bytes(bytes.get(..8).ok_or_else(short)?.try_into().map_err(|_| short())?);
        let len = u32::from_le_bytes(bytes.get(8..12).ok_or_else(short)?.try_into().map_err(|_| short())?) as usize;
        let name = bytes.get(12..12 + len).ok_or_else(|| "request shorter than its name".to_string())?;
        let name = std::str::from_utf8(name).map_err(|_| "the name is not UTF-8".to_string())?.to_string();
        Ok(Self { name, timeout: Duration::from_millis(timeout), payload: bytes[12 + len..].to_vec() })
    }
}

/// A node's answer to a lookup: one `kind name` line per match (`g` a GPU actor, `a` anything else). Names
/// never hold a space or a newline (the registry's rules).
pub(crate) fn encode_names<'a>(names: impl IntoIterator<Item = (&'a str, bool)>) -> String {
    let mut out = String::new();
    for (name, gpu) in names {
        out.push(if gpu { 'g' } else { 'a' });
        out.push(' ');
        out.push_str(name);
        out.push('\n');
    }
    out
}

/// The inverse of [`encode_names`]: `(name, is_gpu)`; a malformed line is skipped.
pub(crate) fn decode_names(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .filter_map(|line| match line.split_once(' ') {
            Some(("g", name)) => Some((name.to_string(), true)),
            Some(("a", name)) => Some((name.to_string(), false)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_lookups_round_trip() {
        let req = Request { name: "fleet/c1".into(), timeout: Duration::from_millis(1500), payload: vec![1, 2, 3] };
        assert_eq!(Request::decode(&req.encode()).unwrap(), req);
        let names = encode_names([("fleet/a", true), ("svc/b", false)]);
        assert_eq!(decode_names(&names), vec![("fleet/a".to_string(), true), ("svc/b".to_string(), false)]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Request::decode(&[1, 2, 3]).is_err());
        let mut bad = Request { name: "x".into(), timeout: Duration::ZERO, payload: vec![] }.encode();
        bad[8] = 200; // a name longer than the request
        assert!(Request::decode(&bad).is_err());
        assert!(decode_names("zz\ng\n").is_empty());
    }
}
