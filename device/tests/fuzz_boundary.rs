//! Random bytes at the boundary: envelopes with random headers and payloads, and command records with random
//! fields, written straight into the shared rings of one target slot. The device must answer with errors,
//! never crash, and never write outside the target slot: neighbouring actors keep their state, generation
//! and counters. CI runs this with the kernel code built under AddressSanitizer + UBSan
//! (`RINGVISOR_KERNEL_SANITIZER=address`, see `.ci/run`), which turns any out-of-bounds access into a failure.

mod common;
use common::*;
use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};
use ringvisor_device::layout::*;
use ringvisor_device::*;

const TARGET: u32 = 1;
const SLOTS: u32 = 3;

fn kv(d: &Device, slot: u32, op: u32, key: u64, value: u64) -> (u32, u64) {
    let mut v = op.to_le_bytes().to_vec();
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&value.to_le_bytes());
    let p = d.call(slot, &v, T).unwrap().payload().unwrap().to_vec();
    (u32::from_le_bytes(p[..4].try_into().unwrap()), u64::from_le_bytes(p[8..16].try_into().unwrap()))
}

fn random_envelopes_and_commands_never_touch_other_slots() {
    let seed = std::env::var("RINGVISOR_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(42u64);
    let mut rng = StdRng::seed_from_u64(seed);
    let d = open_with(DeviceConfig::default().slots(SLOTS).inbox_capacity(16).state_bytes(512));
    for s in 0..SLOTS {
        d.create(s, "kv", &[]).unwrap().wait_blocking(T).unwrap();
    }
    for s in [0, 2] {
        for k in 0..10 {
            kv(&d, s, 1, k, k * 10 + s as u64);
        }
    }
    let neighbours_before: Vec<SlotSnapshot> = [0, 2].iter().map(|&s| d.snapshot(s).unwrap()).collect();
    let events = d.subscribe();
    let behaviours = [0u32, 1, 2, 3, 4, 5, 16, 255, 256, u32::MAX];
    for round in 0..2000 {
        if rng.gen_bool(0.7) {
            // a random envelope into the target's inbox: random kind, length field, destination, flags, payload
            let mut payload = [0u8; PAYLOAD_BYTES];
            rng.fill_bytes(&mut payload);
            let len = rng.gen_range(0..=PAYLOAD_BYTES);
            let env = Envelope::to_actor(TARGET, rng.next_u64(), &payload[..len], rng.gen_bool(0.5)).unwrap();
            let env = env.with_raw_header(rng.gen(), rng.gen(), if rng.gen_bool(0.8) { TARGET } else { rng.gen() });
            match d.send_envelope(TARGET, env) {
                Ok(()) | Err(DeviceError::InboxFull { .. }) | Err(DeviceError::NotAccepting { .. }) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        } else {
            // a random command for the target (or for a slot that does not exist)
            let mut init = [0u8; RV_INIT_BYTES as usize];
            rng.fill_bytes(&mut init);
            let cmd = RawCommand {
                op: rng.gen_range(0..8),
                slot: if rng.gen_bool(0.9) { TARGET } else { rng.gen_range(SLOTS..u32::MAX) },
                expected_generation: if rng.gen_bool(0.5) { d.snapshot(TARGET).unwrap().generation } else { rng.gen() },
                behaviour: behaviours[rng.gen_range(0..behaviours.len())],
                cmd_id: rng.gen(),
                inbox_index: if rng.gen_bool(0.5) { d.snapshot(TARGET).unwrap().inbox.1 } else { rng.gen() },
                init_len: if rng.gen_bool(0.8) { rng.gen_range(0..=RV_INIT_BYTES) } else { rng.gen() },
                init,
            };
            d.submit_raw_command(cmd).unwrap();
        }
        while d.replies().try_recv().is_some() {}
    }
    // Block 0 processed every command (each yields exactly one event, now or when the actor acknowledges).
    eventually("commands processed", || d.stats().commands_processed >= 1);
    let mut seen = 0;
    while events.recv_timeout(std::time::Duration::from_millis(200)).is_some() {
        seen += 1;
    }
    assert!(seen > 100, "the fuzzed commands produced events ({seen})");
    let neighbours_after: Vec<SlotSnapshot> = [0, 2].iter().map(|&s| d.snapshot(s).unwrap()).collect();
    for (b, a) in neighbours_before.iter().zip(&neighbours_after) {
        assert_eq!(
            (a.state, a.generation, a.messages_processed, a.inbox, a.k2k),
            (b.state, b.generation, b.messages_processed, b.inbox, b.k2k)
        );
        assert_eq!(a.bad_envelopes, 0);
    }
    for s in [0, 2] {
        for k in 0..10 {
            assert_eq!(kv(&d, s, 2, k, 0), (0, k * 10 + s as u64), "slot {s} key {k} intact");
        }
    }
    d.shutdown();
}

on_every_backend!(random_envelopes_and_commands_never_touch_other_slots,);
