//! `rate-limiter`: the `ringvisor` command (`run`, `check`, `chaos`, the live view, `--json`, Prometheus) with
//! the `token_bucket` behaviour registered, on devices of 64 slots (`--slots` overrides):
//!
//! ```sh
//! cargo run -p ringvisor-example-rate-limiter -- run examples/rate_limiter/limiters.toml
//! ```

use std::process::ExitCode;

use ringvisor::device::DeviceConfig;

fn main() -> ExitCode {
    match ringvisor_example_rate_limiter::behaviours() {
        Ok(set) => ringvisor::app::command::main_with(DeviceConfig::default().slots(64).behaviours(set)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
