//! The CUDA backend beside the floor of this machine, measured in the same run (the full run's last rows, or alone
//! with `--only-cuda`): the floor probe
//! (one GPU thread ping-ponging a flag with the host through mapped memory) against a kernel launch per request,
//! then `Device::call` round trips (default and latency mode) and a restart against that floor. On the GPU
//! `RINGVISOR_BACKEND` names (`cuda`, `cuda-event`); elsewhere on the emulated driver, whose rows are its
//! prediction of the GPU (its cost model of mapped memory: `EmulatedGpu::mapped_latency`).

use std::time::{Duration, Instant};

use ringvisor::device::{
    cuda_floor, Backend, CudaConfig, CudaDriver, Device, DeviceConfig, EmulatedDriver, EmulatedGpu,
};

use crate::scenarios::call_breakdown;
use crate::stats::{Row, Summary, Unit};

const T: Duration = Duration::from_secs(30);

/// The CUDA configuration to measure: the real driver where `RINGVISOR_BACKEND` names it, else the emulated one.
fn config() -> (CudaConfig, &'static str) {
    match Backend::from_env() {
        Ok(Backend::Cuda(c)) if c.driver == CudaDriver::Real => (c, "cuda"),
        _ => (
            CudaConfig {
                driver: CudaDriver::Emulated(EmulatedDriver::new(EmulatedGpu::default())),
                ..CudaConfig::default()
            },
            "emulated cuda (prediction)",
        ),
    }
}

fn nanos(name: &str, samples: &[u64]) -> Summary {
    Summary::of(name, samples.iter().map(|&n| n as f64).collect(), Unit::Nanos)
}

/// Median of `n` round trips of an 8-byte call to an echo actor.
fn call(config: &CudaConfig, latency_mode: bool, n: usize) -> Result<Summary, String> {
    let device = DeviceConfig::default().slots(4).latency_mode(latency_mode).lost_after(None);
    let d = Device::open(device.backend(Backend::Cuda(config.clone()))).map_err(|e| e.to_string())?;
    d.create(0, "echo", &[]).and_then(|p| p.wait_blocking(T)).map_err(|e| e.to_string())?;
    let payload = [7u8; 8];
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t0 = Instant::now();
        d.call(0, &payload, T).map_err(|e| e.to_string())?;
        if i >= n / 10 {
            samples.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let mode = if latency_mode { ", latency mode" } else { "" };
    Ok(nanos(&format!("Device::call 8 B echo{mode}"), &samples))
}

/// Median of `n` restarts of a running actor, each waited for.
fn restart(config: &CudaConfig, n: usize) -> Result<Summary, String> {
    let device = DeviceConfig::default().slots(4).lost_after(None);
    let d = Device::open(device.backend(Backend::Cuda(config.clone()))).map_err(|e| e.to_string())?;
    d.create(0, "test", &[]).and_then(|p| p.wait_blocking(T)).map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        d.restart(0, "test", &[]).and_then(|p| p.wait_blocking(T)).map_err(|e| e.to_string())?;
        samples.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(nanos("Device::restart, waited", &samples))
}

/// The rows; none (with a message) where the floor cannot be measured.
pub fn cuda_rows(samples: usize) -> Vec<Row> {
    let (config, label) = config();
    eprintln!("cuda ({label}): the floor, then calls and restarts beside it ...");
    let floor = match cuda_floor(&config, samples) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cuda: no floor ({e}): no cuda rows");
            return Vec::new();
        }
    };
    eprintln!("cuda floor on {}", floor.gpu);
    let ping = || nanos(&format!("floor: mapped-memory ping-pong, {}", floor.gpu), &floor.ping_pong_ns);
    let mut rows = vec![Row::new(
        &format!("{label}: the floor against a kernel launch + sync per request"),
        ping(),
        nanos("kernel launch + stream sync", &floor.launch_ns),
        "none: the floor of a round trip, and what a launch per request costs",
        |_, _, _| true,
    )];
    let report = |what: &str, r: Result<Summary, String>, target: &str, limit: f64, rows: &mut Vec<Row>| match r {
        Ok(s) => rows.push(Row::new(&format!("{label}: {what}"), s, ping(), target, move |_, _, ratio| ratio <= limit)),
        Err(e) => eprintln!("cuda: {what}: {e}"),
    };
    report("round trip against the floor", call(&config, false, samples), "<= 3x the floor", 3.0, &mut rows);
    report(
        "round trip, latency mode, against the floor",
        call(&config, true, samples),
        "<= 2x the floor",
        2.0,
        &mut rows,
    );
    report("restart against the floor", restart(&config, samples / 10 + 1), "none: reported", f64::INFINITY, &mut rows);
    for latency_mode in [false, true] {
        let device = DeviceConfig::default().slots(4).latency_mode(latency_mode).lost_after(None);
        match call_breakdown(device.backend(Backend::Cuda(config.clone())), samples / 4 + 1) {
            Ok(hops) => {
                for hop in hops {
                    eprintln!("cuda call breakdown: {} median {:.2} µs", hop.name, hop.median / 1e3);
                    rows.push(Row::new(
                        &format!("{label}: a call hop by hop (device stamps in host time)"),
                        hop,
                        ping(),
                        "none: where a call's time goes, beside the floor",
                        |_, _, _| true,
                    ));
                }
            }
            Err(e) => eprintln!("cuda: call breakdown: {e}"),
        }
    }
    rows
}
