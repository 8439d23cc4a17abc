//! `rate-limiter`: the full `ringvisor` command (`run`, `check`, `chaos`, the live view, `--json`,
//! Prometheus) with the `token_bucket` behaviour registered:
//!
//! ```sh
//! cargo run -p ringvisor-example-rate-limiter -- run examples/rate_limiter/limiters.toml
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    match ringvisor_example_rate_limiter::behaviours() {
        Ok(set) => ringvisor::app::command::main(set),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
