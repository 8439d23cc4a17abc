//! Helpers shared by the facade's integration tests.
pub mod chaos;
#[cfg(all(feature = "cluster", feature = "cli"))]
#[allow(dead_code)]
pub mod cluster;
pub mod otp;

/// Whether wgpu finds a Vulkan adapter for the wgpu backend. Without one a wgpu test returns early, saying so;
/// with `RINGVISOR_REQUIRE_WGPU=1` (CI, which installs lavapipe) a missing adapter fails the test instead.
#[allow(dead_code)]
pub fn wgpu_or_skip() -> bool {
    if !ringvisor::device::wgpu_adapters().is_empty() {
        return true;
    }
    assert!(
        std::env::var("RINGVISOR_REQUIRE_WGPU").map_or(true, |v| v != "1"),
        "RINGVISOR_REQUIRE_WGPU=1 but wgpu finds no Vulkan adapter (apt-get install mesa-vulkan-drivers)"
    );
    eprintln!("SKIPPED: no Vulkan adapter for the wgpu backend; set RINGVISOR_REQUIRE_WGPU=1 to make this a failure");
    false
}

/// Waits until `f` holds, looking every 2 ms; fails the test, naming `what`, past `within`.
#[allow(dead_code)]
pub async fn eventually(what: &str, within: std::time::Duration, mut f: impl FnMut() -> bool) {
    eventually_some(what, within, || f().then_some(())).await
}

/// Waits until `f` gives a value, looking every 2 ms, and returns it; fails the test, naming `what`, past
/// `within`.
#[allow(dead_code)]
pub async fn eventually_some<T>(what: &str, within: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// The running total a `counter` GPU actor answers after adding `delta`.
#[allow(dead_code)]
pub async fn counter_total(
    actor: &ringvisor::supervisor::GpuActorRef,
    delta: i64,
    timeout: std::time::Duration,
) -> Result<i64, ringvisor::supervisor::SendError> {
    let r: [i64; 2] = actor.call(&delta.to_le_bytes(), timeout).await?.decode().expect("counter reply");
    Ok(r[0])
}

/// A `test` GPU actor's message: `op`, a u32 argument, a u64 argument (`kernels/behaviours/test.cu`).
#[allow(dead_code)]
pub fn test_msg(op: u32, arg: u32, wide: u64) -> Vec<u8> {
    let mut v = op.to_le_bytes().to_vec();
    v.extend_from_slice(&arg.to_le_bytes());
    v.extend_from_slice(&wide.to_le_bytes());
    v
}

/// A runtime of one one_for_one supervisor (intensity 100 in 5 s) over `children`, on a small CPU device (8 slots,
/// inboxes of 8, outboxes of 16, 64 bytes of state).
#[allow(dead_code)]
pub async fn small_runtime(children: Vec<ringvisor::supervisor::ChildSpec>) -> ringvisor::Runtime {
    use ringvisor::supervisor::{Strategy, SupervisorSpec};
    let mut spec = SupervisorSpec::new(Strategy::OneForOne).intensity(100, std::time::Duration::from_secs(5));
    for c in children {
        spec = spec.child(c);
    }
    let config =
        ringvisor::device::DeviceConfig::default().slots(8).inbox_capacity(8).outbox_capacity(16).state_bytes(64);
    ringvisor::Runtime::start(config, spec).await.expect("runtime starts")
}
