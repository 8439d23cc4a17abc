//! Messages as the host sees them: envelopes, replies, and typed payloads.
//!
//! A payload of up to [`PAYLOAD_BYTES`] bytes travels inside its envelope; a larger one (up to the device's
//! `DeviceConfig::bulk_bytes`, see [`Device::max_payload`](crate::Device::max_payload)) in the slot's bulk
//! area, which the envelope refers to; [`Envelope::payload`] is the whole payload either way. Plain `#[repr(C)]` types that implement [`bytemuck::Pod`] go
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
    /// The actor in `slot` of device `device` of the runtime: the source of a kernel-to-kernel message the
    /// host routed here (see [`Router`](crate::Router)).
    Routed {
        /// The device's index in the runtime.
        device: u32,
        /// Its slot there.
        slot: u32,
    },
}

impl Endpoint {
    fn from_raw(raw: u32) -> Self {
        if raw == RV_HOST_ENDPOINT {
            Self::Host
        } else if raw & RV_ROUTED_BIT != 0 {
            let (device, slot) = split_routed_address(raw);
            Self::Routed { device, slot }
        } else {
            Self::Slot(raw)
        }
    }
}

/// The routed kernel-to-kernel address of the actor in `slot` of device `device` of a runtime, what the device
/// code's `rv_address(device, slot)` computes: a behaviour's `rv_send` or `rv_forward` to it goes through the
/// host (the device's [`Router`](crate::Router)), to any device of the runtime. `None` for a device index of
/// [`RV_MAX_ROUTED_DEVICES`] or more, or a slot of 2^24 or more.
pub fn routed_address(device: u32, slot: u32) -> Option<u32> {
    (device < RV_MAX_ROUTED_DEVICES && slot <= RV_ROUTED_SLOT_MASK)
        .then_some(RV_ROUTED_BIT | (device << RV_ROUTED_DEVICE_SHIFT) | slot)
}

/// The device index and slot of a routed address (its bit set).
pub(crate) fn split_routed_address(address: u32) -> (u32, u32) {
    ((address & !RV_ROUTED_BIT) >> RV_ROUTED_DEVICE_SHIFT, address & RV_ROUTED_SLOT_MASK)
}

/// An envelope's payload: inline, or the bytes of a large message (read from its bulk area).
#[derive(Clone, PartialEq, Eq)]
enum Body {
    Inline { len: u16, bytes: [u8; PAYLOAD_BYTES] },
    Large(Box<[u8]>),
}

/// An envelope: header fields and its payload (inline up to [`PAYLOAD_BYTES`], or a large message's bytes).
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
    body: Body,
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
    /// A host-to-actor envelope; fails if the payload does not fit one envelope (a larger one goes through
    /// [`Device::send`](crate::Device::send) and friends, which know the device's bulk areas).
    pub fn to_actor(destination: u32, correlation: u64, payload: &[u8], want_reply: bool) -> Result<Self, DeviceError> {
        check_payload(payload)?;
        Ok(Self::to_actor_unchecked(destination, correlation, payload, want_reply))
    }

    /// The raw form of [`Envelope::to_actor_unchecked`] with an HLC stamp, written straight into a
    /// `RawEnvelope` (a send's path: the payload copied once, where building the `Envelope` and then its raw form
    /// copied it twice and made the second copy wait on the first's stores, a third of a batched send's time).
    /// A payload that does not fit one envelope leaves it empty, as [`Envelope::to_raw`] does (its bytes go to
    /// the bulk area).
    pub(crate) fn raw_to_actor(
        destination: u32,
        correlation: u64,
        payload: &[u8],
        want_reply: bool,
        hlc: u64,
    ) -> RawEnvelope {
        let inline = if payload.len() <= PAYLOAD_BYTES { payload } else { &[] };
        let mut bytes = [0u8; PAYLOAD_BYTES];
        bytes[..inline.len()].copy_from_slice(inline);
        RawEnvelope {
            kind: RV_KIND_USER as u8,
            flags: if want_reply { 0 } else { RV_FLAG_NO_REPLY as u8 },
            payload_len: inline.len() as u16,
            source: RV_HOST_ENDPOINT,
            destination,
            generation: 0,
            correlation,
            hlc,
            payload: bytes,
        }
    }

    /// A host-to-actor envelope for a payload of any length (the caller checked it against the device's limit).
    pub(crate) fn to_actor_unchecked(destination: u32, correlation: u64, payload: &[u8], want_reply: bool) -> Self {
        Self {
            kind: RV_KIND_USER as u8,
            flags: if want_reply { 0 } else { RV_FLAG_NO_REPLY as u8 },
            source: RV_HOST_ENDPOINT,
            destination,
            generation: 0,
            correlation,
            hlc: 0,
            body: Body::from_slice(payload),
        }
    }

    /// Who sent it.
    pub fn sender(&self) -> Endpoint {
        Endpoint::from_raw(self.source)
    }

    /// The payload bytes (a large message's whole payload).
    pub fn payload(&self) -> &[u8] {
        match &self.body {
            Body::Inline { len, bytes } => &bytes[..(*len as usize).min(PAYLOAD_BYTES)],
            Body::Large(bytes) => bytes,
        }
    }

    /// Whether the payload is larger than one envelope holds (it travelled in a bulk area).
    pub fn is_large(&self) -> bool {
        matches!(self.body, Body::Large(_))
    }

    /// An envelope as read from a ring: `large` holds a large message's bytes, read from its bulk area.
    pub(crate) fn from_raw_parts(raw: &RawEnvelope, large: Option<Vec<u8>>) -> Self {
        let mut env = Self::from_raw(raw);
        if let Some(bytes) = large {
            env.body = Body::Large(bytes.into_boxed_slice());
        }
        env
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
            body: Body::Inline { len: raw.payload_len.min(RV_PAYLOAD_BYTES as u16), bytes: raw.payload },
        }
    }

    /// The envelope as written to a ring. A large message's payload is not in it: the writer puts the bytes in
    /// the bulk area and the reference in the envelope (`bulk::set_reference`).
    pub(crate) fn to_raw(&self) -> RawEnvelope {
        let (len, payload) = match &self.body {
            Body::Inline { len, bytes } => (*len, *bytes),
            Body::Large(_) => (0, [0u8; PAYLOAD_BYTES]),
        };
        RawEnvelope {
            kind: self.kind,
            flags: self.flags,
            payload_len: len,
            source: self.source,
            destination: self.destination,
            generation: self.generation,
            correlation: self.correlation,
            hlc: self.hlc,
            payload,
        }
    }

    /// Overrides the raw header fields; for tests that feed malformed envelopes to the device.
    #[doc(hidden)]
    pub fn with_raw_header(mut self, kind: u8, payload_len: u16, destination: u32) -> Self {
        self.kind = kind;
        if let Body::Inline { len, .. } = &mut self.body {
            *len = payload_len;
        }
        self.destination = destination;
        self
    }

    /// The raw payload length field (may exceed [`PAYLOAD_BYTES`] in a malformed envelope; a large message's
    /// length, saturated at `u16::MAX`).
    pub fn raw_payload_len(&self) -> u16 {
        match &self.body {
            Body::Inline { len, .. } => *len,
            Body::Large(bytes) => bytes.len().min(u16::MAX as usize) as u16,
        }
    }
}

impl Body {
    fn from_slice(payload: &[u8]) -> Self {
        if payload.len() > PAYLOAD_BYTES {
            return Self::Large(payload.into());
        }
        let mut bytes = [0u8; PAYLOAD_BYTES];
        bytes[..payload.len()].copy_from_slice(payload);
        Self::Inline { len: payload.len() as u16, bytes }
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
        decode_pod(self.payload()?)
    }

    /// The envelope as the device wrote it.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

/// A reply's bytes as a plain `#[repr(C)]` type: exactly `size_of::<T>()` bytes, or a codec error with the sizes
/// (what [`Reply::decode`] does with a reply's payload).
pub fn decode_pod<T: bytemuck::Pod>(bytes: &[u8]) -> Result<T, DeviceError> {
    bytemuck::try_pod_read_unaligned(bytes).map_err(|e| {
        DeviceError::Codec(format!("reply of {} bytes is not a {}: {e}", bytes.len(), std::any::type_name::<T>()))
    })
}

/// The bytes of a plain `#[repr(C)]` payload (zero-copy).
pub fn pod_bytes<T: bytemuck::Pod>(value: &T) -> &[u8] {
    bytemuck::bytes_of(value)
}

/// What rkyv can archive for a message (the bound of [`archive`] and [`encode_archived`]).
pub trait Archivable:
    for<'a> rkyv::Serialize<
    rkyv::api::high::HighSerializer<rkyv::util::AlignedVec, rkyv::ser::allocator::ArenaHandle<'a>, rkyv::rancor::Error>,
>
{
}

impl<T> Archivable for T where
    T: for<'a> rkyv::Serialize<
        rkyv::api::high::HighSerializer<
            rkyv::util::AlignedVec,
            rkyv::ser::allocator::ArenaHandle<'a>,
            rkyv::rancor::Error,
        >,
    >
{
}

/// What rkyv can validate and decode from a message (the bound of [`decode_archived`]).
pub trait Unarchivable: rkyv::Archive<Archived = Self::Checked> + Sized {
    /// The archived form, checkable and deserialisable.
    type Checked: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<Self, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>;
}

impl<T> Unarchivable for T
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    type Checked = T::Archived;
}

/// Encodes a host-side type with rkyv, of any length (a device takes it up to its
/// [`Device::max_payload`](crate::Device::max_payload)).
pub fn archive<T: Archivable>(value: &T) -> Result<Vec<u8>, DeviceError> {
    let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(value).map_err(|e| DeviceError::Codec(e.to_string()))?;
    Ok(bytes.to_vec())
}

/// Encodes a host-side type with rkyv; fails if the archive does not fit in one envelope (see [`archive`] for
/// a device with bulk areas).
pub fn encode_archived<T: Archivable>(value: &T) -> Result<Vec<u8>, DeviceError> {
    let bytes = archive(value)?;
    check_payload(&bytes)?;
    Ok(bytes)
}

/// Decodes and validates an rkyv archive produced by [`encode_archived`] (or by a device behaviour).
pub fn decode_archived<T: Unarchivable>(bytes: &[u8]) -> Result<T, DeviceError> {
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(bytes);
    rkyv::from_bytes::<T, rkyv::rancor::Error>(&aligned).map_err(|e| DeviceError::Codec(e.to_string()))
}

/// Whether `payload` fits one envelope ([`PAYLOAD_BYTES`]). A device with bulk areas takes larger messages:
/// [`Device::check_payload`](crate::Device::check_payload) is the check against a device's own limit, made
/// before anything is written or queued.
pub fn check_payload(payload: &[u8]) -> Result<(), DeviceError> {
    if payload.len() > PAYLOAD_BYTES {
        return Err(DeviceError::PayloadTooLarge { len: payload.len(), max: PAYLOAD_BYTES });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The send path's direct raw envelope is the one built through `Envelope` (header, length, payload, stamp).
    #[test]
    fn a_raw_envelope_built_directly_is_the_envelopes_raw_form() {
        for len in [0, 1, 5, 64, PAYLOAD_BYTES, PAYLOAD_BYTES + 1, 4096] {
            let payload: Vec<u8> = (0..len).map(|b| (b as u8).wrapping_mul(7).wrapping_add(1)).collect();
            for want_reply in [false, true] {
                let direct = Envelope::raw_to_actor(3, 99, &payload, want_reply, 0xABCD_0000);
                let mut built = Envelope::to_actor_unchecked(3, 99, &payload, want_reply).to_raw();
                built.hlc = 0xABCD_0000;
                let fields = |r: &RawEnvelope| {
                    (r.kind, r.flags, r.payload_len, r.source, r.destination, r.generation, r.correlation, r.hlc)
                };
                assert_eq!(fields(&direct), fields(&built), "len {len}, reply {want_reply}");
                assert_eq!(direct.payload, built.payload, "len {len}, reply {want_reply}");
            }
        }
    }
}
