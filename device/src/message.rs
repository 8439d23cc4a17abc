//! Messages as the host sees them: envelopes, replies, and typed payloads.
//!
//! Payloads are at most [`PAYLOAD_BYTES`] bytes. Plain `#[repr(C)]` types that implement [`bytemuck::Pod`] go
//! zero-copy ([`pod_bytes`], [`Reply::decode`]); host-side types that need a validated encoding use rkyv
//! ([`encode_archived`], [`decode_archived`]), which checks the bytes before anything is read from them.

use crate::codes::DeviceCode;
use crate::error::DeviceError;
use crate::layout::*;

/// Payload bytes one envelope carries.
pub const PAYLOAD_BYTES: usize = RV_PAYLOAD_BYTES as usize;

/// One end of a message: the host, or an actor's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// The host (a `send`, `post` or `call`).
    Host,
    /// The actor in this slot (a kernel-to-kernel message).
    Slot(u32),
}

impl Endpoint {
    fn from_raw(raw: u32) -> Self {
        if raw == RV_HOST_ENDPOINT {
            Self::Host
        } else {
            Self::Slot(raw)
        }
    }
}

/// An envelope: header fields and up to [`PAYLOAD_BYTES`] of payload.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope {
    /// `RV_KIND_*`.
    pub kind: u8,
    /// `RV_FLAG_*`.
    pub flags: u8,
    /// Sending slot, or the host endpoint.
    pub source: u32,
    /// Receiving slot, or the host endpoint.
    pub destination: u32,
    /// Generation of the sender (replies) or 0.
    pub generation: u32,
    /// Correlation id chosen by the host.
    pub correlation: u64,
    /// Hybrid logical clock timestamp.
    pub hlc: u64,
    len: u16,
    payload: [u8; PAYLOAD_BYTES],
}

impl std::fmt::Debug for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envelope")
            .field("kind", &self.kind)
            .field("flags", &self.flags)
            .field("source", &self.source)
            .field("destination", &self.destination)
            .field("generation", &self.generation)
            .field("correlation", &self.correlation)
            .field("hlc", &self.hlc)
            .field("payload", &self.payload())
            .finish()
    }
}

impl Envelope {
    /// A host-to-actor envelope; fails if the payload does not fit.
    pub fn to_actor(destination: u32, correlation: u64, payload: &[u8], want_reply: bool) -> Result<Self, DeviceError> {
        check_payload(payload)?;
        Ok(Self::to_actor_unchecked(destination, correlation, payload, want_reply))
    }

    /// [`Envelope::to_actor`] for a payload [`check_payload`] accepted.
    pub(crate) fn to_actor_unchecked(destination: u32, correlation: u64, payload: &[u8], want_reply: bool) -> Self {
        let mut bytes = [0u8; PAYLOAD_BYTES];
        bytes[..payload.len()].copy_from_slice(payload);
        Self {
            kind: RV_KIND_USER as u8,
            flags: if want_reply { 0 } else { RV_FLAG_NO_REPLY as u8 },
            source: RV_HOST_ENDPOINT,
            destination,
            generation: 0,
            correlation,
            hlc: 0,
            len: payload.len() as u16,
            payload: bytes,
        }
    }

    /// Who sent it.
    pub fn sender(&self) -> Endpoint {
        Endpoint::from_raw(self.source)
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload[..(self.len as usize).min(PAYLOAD_BYTES)]
    }

    pub(crate) fn from_raw(raw: &RawEnvelope) -> Self {
        Self {
            kind: raw.kind,
            flags: raw.flags,
            source: raw.source,
            destination: raw.destination,
            generation: raw.generation,
            correlation: raw.correlation,
            hlc: raw.hlc,
            len: raw.payload_len.min(RV_PAYLOAD_BYTES as u16),
            payload: raw.payload,
        }
    }

    pub(crate) fn to_raw(&self) -> RawEnvelope {
        RawEnvelope {
            kind: self.kind,
            flags: self.flags,
            payload_len: self.len,
            source: self.source,
            destination: self.destination,
            generation: self.generation,
            correlation: self.correlation,
            hlc: self.hlc,
            payload: self.payload,
        }
    }

    /// Overrides the raw header fields; for tests that feed malformed envelopes to the device.
    #[doc(hidden)]
    pub fn with_raw_header(mut self, kind: u8, payload_len: u16, destination: u32) -> Self {
        self.kind = kind;
        self.len = payload_len;
        self.destination = destination;
        self
    }

    /// The raw payload length field (may exceed [`PAYLOAD_BYTES`] in a malformed envelope).
    pub fn raw_payload_len(&self) -> u16 {
        self.len
    }
}

/// A reply from an actor: either a payload, or an error code (`RV_KIND_ERROR`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The replying slot.
    pub slot: u32,
    /// The generation of the replying actor.
    pub generation: u32,
    /// The correlation id of the message it answers.
    pub correlation: u64,
    /// The actor's hybrid logical clock when it replied.
    pub hlc: u64,
    envelope: Envelope,
}

impl Reply {
    pub(crate) fn from_envelope(slot: u32, envelope: Envelope) -> Self {
        Self { slot, generation: envelope.generation, correlation: envelope.correlation, hlc: envelope.hlc, envelope }
    }

    /// True if the device answered with an error instead of a reply.
    pub fn is_error(&self) -> bool {
        self.envelope.kind as u32 == RV_KIND_ERROR
    }

    /// The reply payload, or the device's error.
    pub fn payload(&self) -> Result<&[u8], DeviceError> {
        if self.is_error() {
            let p = self.envelope.payload();
            let code = p.get(..4).map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes"))).unwrap_or(0);
            let detail = p.get(4..8).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).unwrap_or(0);
            return Err(DeviceError::ErrorReply { code: DeviceCode::from_raw(code), detail });
        }
        Ok(self.envelope.payload())
    }

    /// Decodes a plain `#[repr(C)]` reply; the payload length must match `T` exactly.
    pub fn decode<T: bytemuck::Pod>(&self) -> Result<T, DeviceError> {
        let bytes = self.payload()?;
        bytemuck::try_pod_read_unaligned(bytes).map_err(|e| {
            DeviceError::Codec(format!("reply of {} bytes is not a {}: {e}", bytes.len(), std::any::type_name::<T>()))
        })
    }

    /// The envelope as the device wrote it.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

/// The bytes of a plain `#[repr(C)]` payload (zero-copy).
pub fn pod_bytes<T: bytemuck::Pod>(value: &T) -> &[u8] {
    bytemuck::bytes_of(value)
}

/// Encodes a host-side type with rkyv; fails if the archive does not fit in one envelope.
pub fn encode_archived<T>(value: &T) -> Result<Vec<u8>, DeviceError>
where
    T: for<'a> rkyv::Serialize<
        rkyv::api::high::HighSerializer<
            rkyv::util::AlignedVec,
            rkyv::ser::allocator::ArenaHandle<'a>,
            rkyv::rancor::Error,
        >,
    >,
{
    let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(value).map_err(|e| DeviceError::Codec(e.to_string()))?;
    check_payload(&bytes)?;
    Ok(bytes.to_vec())
}

/// Decodes and validates an rkyv archive produced by [`encode_archived`] (or by a device behaviour).
pub fn decode_archived<T>(bytes: &[u8]) -> Result<T, DeviceError>
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(bytes);
    rkyv::from_bytes::<T, rkyv::rancor::Error>(&aligned).map_err(|e| DeviceError::Codec(e.to_string()))
}

/// Whether `payload` fits one envelope ([`PAYLOAD_BYTES`]): the one check of a payload's length on the host,
/// made before anything is written or queued.
pub fn check_payload(payload: &[u8]) -> Result<(), DeviceError> {
    if payload.len() > PAYLOAD_BYTES {
        return Err(DeviceError::PayloadTooLarge { len: payload.len(), max: PAYLOAD_BYTES });
    }
    Ok(())
}
