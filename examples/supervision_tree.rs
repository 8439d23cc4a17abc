//! The same supervision tree built in code and loaded from `examples/fleet.toml`; then the TOML one runs:
//! a sensor crashes, `rest_for_one` restarts it and the sensors after it, wildcard lookups find them.
use ringvisor::prelude::*;
use ringvisor::supervisor::TreeEvent;

fn fleet() -> SupervisorSpec {
    let sensor = |n: u32| ChildSpec::gpu(format!("s{n}"), GpuChild::new("echo")).name(format!("fleet/sensors/s{n}"));
    let sensors = SupervisorSpec::new(Strategy::RestForOne)
        .intensity(3, Duration::from_secs(5))
        .child(sensor(1))
        .child(sensor(2))
        .child(sensor(3));
    SupervisorSpec::new(Strategy::OneForOne)
        .intensity(5, Duration::from_secs(10))
        .child(ChildSpec::gpu("totals", GpuChild::new("counter")).name("fleet/totals"))
        .child(ChildSpec::supervisor("sensors", sensors).name("fleet/sensors"))
        .child(
            ChildSpec::gpu("cache", GpuChild::new("kv"))
                .name("fleet/cache")
                .restart(Restart::Transient)
                .shutdown(Shutdown::Timeout(Duration::from_secs(2)))
                .backoff(Backoff::exponential(Duration::from_millis(10), Duration::from_secs(1))),
        )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fleet.toml");
    let from_toml = SpecLoader::new().behaviours(["counter", "echo", "kv"]).load_file(path)?;
    assert_eq!(from_toml.outline(), fleet().outline(), "the TOML file and the builder describe the same tree");
    print!("{}", from_toml.outline());

    let rt = Runtime::builder().device(DeviceConfig::default().slots(16)).start(from_toml).await?;
    let mut events = rt.services().events().subscribe();
    let sensors: Vec<String> = rt.find("fleet/sensors/*")?.into_iter().map(|(name, _)| name).collect();
    println!("fleet/sensors/* -> {sensors:?}");

    // s2 crashes (the next message it gets fails it): s2 and s3 restart, s1 is untouched.
    let s2 = rt.gpu("fleet/sensors/s2").expect("registered");
    rt.device().inject(s2.slot(), SlotFault::CrashNextMessage)?;
    s2.send(b"reading")?;
    let mut restarted = Vec::new();
    while restarted.len() < 2 {
        if let Some(TreeEvent::ChildStarted { child, .. }) = events.recv().await {
            restarted.push(child);
        }
    }
    println!("restarted after s2 crashed: {restarted:?}");
    let echo = s2.call(b"hello again", Duration::from_secs(5)).await?;
    println!("s2 answers: {:?} (generation {})", String::from_utf8_lossy(echo.payload()?), echo.generation);
    println!("dead letters: {}", rt.dead_letters().stats());
    rt.shutdown().await;
    Ok(())
}
