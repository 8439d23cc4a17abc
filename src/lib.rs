//! # ringvisor
//!
//! Erlang/OTP-style supervision for persistent GPU actors. This facade re-exports the layers:
//! [`device`] (the persistent kernel, its shared layout and backends) and [`supervisor`] (policy).
#![warn(missing_docs)]

pub use ringvisor_device as device;
pub use ringvisor_supervisor as supervisor;
