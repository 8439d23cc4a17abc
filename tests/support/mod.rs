//! Helpers shared by the facade's integration tests.
pub mod chaos;
pub mod otp;
