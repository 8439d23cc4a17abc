//! A supervised GPU actor spawned, messaged, crashed and restarted (the README's example).
use ringvisor::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(3, Duration::from_secs(5))
        .child(ChildSpec::gpu("counter", GpuChild::new("counter")).name("app/counter"));
    let rt = Runtime::start(DeviceConfig::default().slots(8), spec).await?;
    let counter = rt.gpu("app/counter").expect("registered by name");
    let total: [i64; 2] = counter.call(&5i64.to_le_bytes(), Duration::from_secs(1)).await?.decode()?;
    println!("total after +5: {}", total[0]);
    let mut dead_letters = rt.dead_letters().subscribe();
    rt.device().inject(counter.slot(), SlotFault::CrashNextMessage)?; // the next message crashes it
    counter.send(&1i64.to_le_bytes())?; // ... this one: quarantined as a poison dead letter
    println!("dead letter: {:?}", dead_letters.recv().await.map(|l| l.reason));
    let again: [i64; 2] = counter.call(&7i64.to_le_bytes(), Duration::from_secs(5)).await?.decode()?;
    println!("restarted with fresh state, total after +7: {}", again[0]);
    println!("dead letters: {}", rt.dead_letters().stats());
    rt.shutdown().await;
    Ok(())
}
