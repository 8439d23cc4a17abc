//! Helpers shared by the facade's integration tests.
pub mod chaos;
#[allow(dead_code)]
pub mod otp;
