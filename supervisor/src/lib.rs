//! # ringvisor-supervisor
//!
//! The policy layer: supervision trees on ractor that decide when `ringvisor-device` creates, kills and
//! restarts GPU actors. Not built yet: see the project's supervision issue. Today it only re-exports the
//! device layer so the facade's layering is in place.
#![warn(missing_docs)]

pub use ringvisor_device as device;
