//! GPU children, from the supervision side. A GPU child is not a ractor actor: its supervisor drives its
//! device slot directly (starts it, drains or kills it) and hears about its end through *notices* routed
//! from the device's event path and the watchdog, so a child costs a slot binding, not a task and a mailbox.
//!
//! - `incarnation.rs`: one incarnation of a GPU child (bring-up, drain or kill on stop, what its end means);
//! - `claim.rs`: a child's hold on its slot (take, start an incarnation, clean up, give back);
//! - `quarantine.rs`: a wedged actor, from stuck to moved (the whole sequence in its module doc);
//!
//! The devices' slots, the notices and the watchdog are one layer down, in `crate::slots`.

pub(crate) mod claim;
pub(crate) mod incarnation;
pub(crate) mod quarantine;
