//! The Prometheus endpoint scraped on loopback over a running tree. (Its own test binary: the recorder is
//! global to a process, so no other test's restarts may land in these counters.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ringvisor::app::prometheus;
use ringvisor::device::SlotFault;
use ringvisor::prelude::*;

const T: Duration = Duration::from_secs(10);

fn tree() -> SupervisorSpec {
    let worker = |id: &str| ChildSpec::gpu(id, GpuChild::new("counter")).name(format!("plant/{id}"));
    SupervisorSpec::new(Strategy::OneForOne).child(worker("pump")).child(worker("valve"))
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_serves_prometheus_text_on_loopback() {
    let addr = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    prometheus::serve(addr).unwrap();
    let rt = Runtime::start(DeviceConfig::default().slots(8), tree()).await.unwrap();
    let pump = rt.gpu("plant/pump").unwrap();
    rt.device().inject(pump.slot(), SlotFault::CrashNextMessage).unwrap();
    let _ = pump.call(&1i64.to_le_bytes(), T).await;
    let deadline = Instant::now() + T;
    let body = loop {
        let body = tokio::task::spawn_blocking(move || scrape(addr)).await.unwrap();
        if body.contains("ringvisor_restarts_total") {
            break body;
        }
        assert!(Instant::now() < deadline, "no restart metric:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let restarts = body
        .lines()
        .find(|l| l.starts_with("ringvisor_restarts_total{") && l.contains("child=\"pump\""))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(restarts.ends_with(" 1"), "{restarts}");
    assert!(body.contains("ringvisor_dead_letters_total{reason=\"poison\"} 1"), "{body}");
    assert!(body.contains("# HELP ringvisor_restarts_total"), "{body}");
    // A second recorder cannot be installed.
    assert!(prometheus::serve(addr).is_err());
    rt.shutdown().await;
}
