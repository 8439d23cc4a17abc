//! One-way throughput: sends and batches of 64-byte and large messages against ractor's `cast` and a crossbeam
//! channel.

use std::hint::spin_loop;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ringvisor::device::{Device, DeviceConfig, DeviceError};

use super::{tokio, T};
use crate::stats::{Summary, Unit};

const PAYLOAD: [u8; 64] = [1; 64];

/// How a producer of [`device_one_way`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sending {
    /// `Device::send`, one message at a time.
    Single,
    /// `Device::send_batch` of this many.
    Batch(usize),
    /// A coalescing `SlotSender` per slot (`Device::sender`), one message at a time.
    Coalesced,
}

/// ringvisor: `producers` threads send 64-byte messages one way into 64 counter actors, each producer to its own
/// slots in turn (a message, or a batch, to each), as `how` says, until `messages` are processed; one sample per
/// run, in messages per second. Each run is followed by a run of the crossbeam channel with as many producers
/// ([`crossbeam_run`], the device idle meanwhile: its workers park within a millisecond), the second summary: the
/// two are measured in turn, not one row after the other, because a machine's cross-core transfers can switch
/// between two speeds for seconds at a time (the development VM's slow mode costs a flood of sends 6x and the
/// channel 3x, docs/benchmarks.md): a ratio of rows measured seconds apart compared two different machines.
pub fn device_one_way(producers: u32, messages: u64, runs: usize, how: Sending) -> (Summary, Summary) {
    const SLOTS: u32 = 64;
    let device =
        Device::open(DeviceConfig::default().slots(SLOTS).inbox_capacity(4096).state_bytes(64)).expect("device");
    for s in 0..SLOTS {
        device.create(s, "counter", &[]).expect("create").wait_blocking(T).expect("created");
    }
    let processed = |d: &Device| (0..SLOTS).map(|s| d.snapshot(s).expect("snapshot").messages_processed).sum::<u64>();
    let (mut samples, mut chan) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let base = processed(&device);
        let t0 = Instant::now();
        let threads: Vec<_> = (0..producers)
            .map(|p| {
                let device = device.clone();
                std::thread::spawn(move || {
                    let mine: Vec<u32> = (0..SLOTS).filter(|s| s % producers == p).collect();
                    let count = messages / u64::from(producers);
                    let batch = match how {
                        Sending::Batch(n) => n,
                        Sending::Single | Sending::Coalesced => 1,
                    };
                    let chunk = vec![PAYLOAD; batch];
                    let senders: Vec<_> = match how {
                        Sending::Coalesced => mine.iter().map(|&s| device.sender(s).expect("sender")).collect(),
                        Sending::Single | Sending::Batch(_) => Vec::new(),
                    };
                    let mut i = 0u64;
                    while i < count {
                        let turn = (i as usize / batch) % mine.len();
                        let want = batch.min((count - i) as usize);
                        let sent = match how {
                            Sending::Single => device.send(mine[turn], &PAYLOAD).map(|_| 1),
                            Sending::Batch(_) => device.send_batch(mine[turn], &chunk[..want]),
                            Sending::Coalesced => senders[turn].send(&PAYLOAD).map(|()| 1),
                        };
                        match sent {
                            Ok(n) => i += n as u64,
                            Err(DeviceError::InboxFull { .. }) => spin_loop(),
                            Err(e) => panic!("send: {e}"),
                        }
                    }
                    // (dropping the senders publishes what they hold)
                })
            })
            .collect();
        for t in threads {
            t.join().expect("producer");
        }
        let total = messages / u64::from(producers) * u64::from(producers);
        while processed(&device) - base < total {
            std::thread::sleep(Duration::from_micros(50));
        }
        samples.push(total as f64 / t0.elapsed().as_secs_f64());
        chan.push(crossbeam_run(producers, messages));
    }
    device.shutdown();
    let how = match how {
        Sending::Single => "send".to_string(),
        Sending::Batch(n) => format!("send_batch({n})"),
        Sending::Coalesced => "SlotSender::send".to_string(),
    };
    (
        Summary::of(&format!("ringvisor {how}, {producers} producer(s)"), samples, Unit::PerSecond),
        Summary::of(&format!("crossbeam bounded channel, {producers} producer(s)"), chan, Unit::PerSecond),
    )
}

struct Count;
enum CountMsg {
    Add([u8; 64]),
    Get(RpcReplyPort<u64>),
}

impl ractor::Message for CountMsg {}

impl Actor for Count {
    type Msg = CountMsg;
    type State = u64;
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<CountMsg>, _: ()) -> Result<u64, ActorProcessingErr> {
        Ok(0)
    }
    async fn handle(&self, _: ActorRef<CountMsg>, msg: CountMsg, n: &mut u64) -> Result<(), ActorProcessingErr> {
        match msg {
            CountMsg::Add(p) => *n += u64::from(p[0]),
            CountMsg::Get(reply) => {
                let _ = reply.send(*n);
            }
        }
        Ok(())
    }
}

/// ractor `cast` of 64-byte messages into counting actors, from `producers` threads.
pub fn ractor_cast(producers: u32, messages: u64, runs: usize) -> Summary {
    let rt = tokio();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let actors: Vec<ActorRef<CountMsg>> =
            rt.block_on(async { futures_all((0..producers).map(|_| Actor::spawn(None, Count, ()))).await });
        let t0 = Instant::now();
        let threads: Vec<_> = actors
            .iter()
            .cloned()
            .map(|a| {
                std::thread::spawn(move || {
                    for _ in 0..messages / u64::from(producers) {
                        a.cast(CountMsg::Add(PAYLOAD)).expect("cast");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("producer");
        }
        let total = messages / u64::from(producers) * u64::from(producers);
        rt.block_on(async {
            let mut seen = 0;
            for a in &actors {
                seen += a.call(CountMsg::Get, None).await.expect("get").unwrap();
            }
            assert_eq!(seen, total, "every cast counted");
        });
        samples.push(total as f64 / t0.elapsed().as_secs_f64());
        for a in actors {
            a.stop(None);
        }
    }
    Summary::of(&format!("ractor cast, {producers} producer(s)"), samples, Unit::PerSecond)
}

async fn futures_all<F, T>(futs: impl Iterator<Item = F>) -> Vec<ActorRef<T>>
where
    F: std::future::Future<Output = Result<(ActorRef<T>, tokio::task::JoinHandle<()>), ractor::SpawnErr>>,
    T: ractor::Message,
{
    let mut out = Vec::new();
    for f in futs {
        out.push(f.await.expect("spawn").0);
    }
    out
}

/// A crossbeam bounded channel (capacity 4,096) of 64-byte arrays from `producers` threads to one consumer, the
/// ceiling of a bare ring: one run of `messages` (split among the producers), in messages per second.
pub fn crossbeam_run(producers: u32, messages: u64) -> f64 {
    let (tx, rx) = crossbeam::channel::bounded::<[u8; 64]>(4096);
    let each = messages / u64::from(producers);
    let total = each * u64::from(producers);
    let t0 = Instant::now();
    let consumer = std::thread::spawn(move || {
        let mut sum = 0u64;
        while let Ok(p) = rx.recv() {
            sum += u64::from(p[0]);
        }
        sum
    });
    let senders: Vec<_> = (0..producers)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for _ in 0..each {
                    tx.send(PAYLOAD).expect("send");
                }
            })
        })
        .collect();
    drop(tx);
    for t in senders {
        t.join().expect("producer");
    }
    assert_eq!(consumer.join().expect("consumer"), total);
    total as f64 / t0.elapsed().as_secs_f64()
}

/// One producer sending `size`-byte messages one way to `echo` GPU actors (no reply: the host copies each into
/// its slot's inbox bulk area, the actor takes it), against a crossbeam bounded channel of `size`-byte arrays
/// from one thread to another. Messages per second.
pub fn large_one_way(size: usize, messages: u64, runs: usize) -> (Summary, Summary) {
    const SLOTS: u32 = 8;
    let device =
        Device::open(DeviceConfig::default().slots(SLOTS).inbox_capacity(256).bulk_bytes(256 * 1024)).expect("device");
    for s in 0..SLOTS {
        device.create(s, "echo", &[]).expect("create").wait_blocking(T).expect("created");
    }
    let processed = |d: &Device| (0..SLOTS).map(|s| d.snapshot(s).expect("snapshot").messages_processed).sum::<u64>();
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let (mut ours, mut chan) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let base = processed(&device);
        let t0 = Instant::now();
        let mut i = 0u64;
        while i < messages {
            match device.send((i % u64::from(SLOTS)) as u32, &payload) {
                Ok(_) => i += 1,
                Err(DeviceError::InboxFull { .. }) => spin_loop(),
                Err(e) => panic!("send: {e}"),
            }
        }
        while processed(&device) - base < messages {
            std::thread::sleep(Duration::from_micros(50));
        }
        ours.push(messages as f64 / t0.elapsed().as_secs_f64());

        let (tx, rx) = crossbeam::channel::bounded::<Box<[u8]>>(256);
        let t0 = Instant::now();
        let consumer = std::thread::spawn(move || {
            let mut n = 0u64;
            while let Ok(p) = rx.recv() {
                n += u64::from(p[0] == 0);
            }
            n
        });
        for _ in 0..messages {
            tx.send(payload.as_slice().into()).expect("send");
        }
        drop(tx);
        assert_eq!(consumer.join().expect("consumer"), messages);
        chan.push(messages as f64 / t0.elapsed().as_secs_f64());
    }
    device.shutdown();
    let kib = size / 1024;
    (
        Summary::of(&format!("ringvisor send, {kib} KiB, 1 producer"), ours, Unit::PerSecond),
        Summary::of(&format!("crossbeam bounded channel of {kib} KiB boxes"), chan, Unit::PerSecond),
    )
}
