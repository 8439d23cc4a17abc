//! Helpers shared by the facade's integration tests.
pub mod chaos;
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
    let deadline = std::time::Instant::now() + within;
    while !f() {
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
