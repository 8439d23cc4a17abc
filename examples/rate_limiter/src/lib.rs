//! A rate limiter per client as GPU actors: the `token_bucket` behaviour (`kernels/token_bucket.cu`, one
//! source for the CPU backend and the GPU), its typed messages, and the behaviour set to run it with.
//!
//! - `limiters.toml` declares 50 limiters with one template entry;
//! - `src/main.rs` is the full `ringvisor` command with this behaviour (`run`, `check`, `chaos`, live view);
//! - `tests/limiters.rs` crashes one limiter on purpose and checks the restart and the dead letter.

use bytemuck::{Pod, Zeroable};
use ringvisor::device::{BehaviourSet, DeviceError};

include!(concat!(env!("OUT_DIR"), "/ringvisor_behaviours.rs"));

/// The built-in behaviours and `token_bucket`.
pub fn behaviours() -> Result<BehaviourSet, DeviceError> {
    let mut set = BehaviourSet::builtins();
    for behaviour in user_behaviours() {
        set.register(behaviour)?;
    }
    Ok(set)
}

/// The init bytes (`tb_init`; in TOML, `init = [{ u32 = client }, { u32 = capacity }, { u32 = refill }]`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Init {
    /// The client this limiter serves (echoed in replies).
    pub client: u32,
    /// Most tokens the bucket holds (and holds when the limiter starts).
    pub capacity: u32,
    /// Tokens gained per second.
    pub refill_per_sec: u32,
}

/// A request (`tb_request`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Request {
    /// [`Request::TAKE`] or [`Request::LAYOUT`].
    pub op: u32,
    /// Tokens to take.
    pub cost: u32,
}

impl Request {
    /// Take `cost` tokens; the reply is a [`Reply`].
    pub const TAKE: u32 = 0;
    /// Ask for the C structs' layout; the reply is a [`Layout`].
    pub const LAYOUT: u32 = 1;

    /// A request for `cost` tokens.
    pub fn take(cost: u32) -> Self {
        Self { op: Self::TAKE, cost }
    }
}

/// The answer to a take (`tb_reply`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct Reply {
    /// The limiter's client.
    pub client: u32,
    /// 1 when the tokens were taken.
    pub granted: u32,
    /// Whole tokens left.
    pub tokens_left: u32,
    /// Zero.
    pub reserved: u32,
    /// Requests granted since this incarnation started.
    pub granted_total: u64,
    /// Requests denied since this incarnation started.
    pub denied_total: u64,
}

/// The C side's sizes and offsets (`tb_layout`), to check that the structs above agree with the C ones.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct Layout {
    /// `sizeof(tb_init)`.
    pub init_size: u32,
    /// `sizeof(tb_request)`.
    pub request_size: u32,
    /// `sizeof(tb_reply)`.
    pub reply_size: u32,
    /// `offsetof(tb_reply, ...)` for each field in order.
    pub reply_offsets: [u32; 6],
}

impl Layout {
    /// What the Rust structs above look like.
    pub fn of_rust() -> Self {
        use std::mem::{offset_of, size_of};
        Self {
            init_size: size_of::<Init>() as u32,
            request_size: size_of::<Request>() as u32,
            reply_size: size_of::<Reply>() as u32,
            reply_offsets: [
                offset_of!(Reply, client) as u32,
                offset_of!(Reply, granted) as u32,
                offset_of!(Reply, tokens_left) as u32,
                offset_of!(Reply, reserved) as u32,
                offset_of!(Reply, granted_total) as u32,
                offset_of!(Reply, denied_total) as u32,
            ],
        }
    }
}
