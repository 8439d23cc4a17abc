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
