//! The Prometheus endpoint: `--metrics-addr 127.0.0.1:PORT` serves every metric ringvisor records (through
//! the `metrics` facade) at `http://ADDR/metrics`.

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;

/// Installs the Prometheus recorder and serves it on `addr` (from within a tokio runtime). Fails if a
/// recorder is already installed or the address cannot be bound.
pub fn serve(addr: SocketAddr) -> Result<(), String> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    describe();
    Ok(())
}

/// Help texts for the metrics ringvisor records.
fn describe() {
    metrics::describe_counter!("ringvisor_restarts_total", "Children restarted by their supervisor");
    metrics::describe_counter!("ringvisor_escalations_total", "Supervisors that exceeded their restart intensity");
    metrics::describe_counter!("ringvisor_dead_letters_total", "Messages that became dead letters, by reason");
    metrics::describe_gauge!("ringvisor_children", "Children per supervisor and state");
    metrics::describe_counter!("ringvisor_watchdog_trips_total", "Hung GPU actors failed by the watchdog");
    metrics::describe_counter!("ringvisor_quarantined_slots_total", "Device slots given up on");
    metrics::describe_counter!(
        "ringvisor_device_restarts_total",
        "Devices restarted (lost, or too many quarantined slots)"
    );
}
