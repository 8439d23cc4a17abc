//! Bad input at the public boundary, as properties (proptest): arbitrary payloads, command sequences and
//! specs get errors, never panics, and never change another actor's state.

use std::time::Duration;

use proptest::prelude::*;
use ringvisor::device::{CommandOp, CommandRequest, Device, DeviceConfig, SlotState};
use ringvisor::supervisor::SpecLoader;

const T: Duration = Duration::from_secs(5);

fn device() -> Device {
    let d = Device::open(DeviceConfig::default().slots(4).inbox_capacity(8).outbox_capacity(8).state_bytes(64))
        .expect("device");
    // slot 3 is the bystander: a counter with a known total
    d.create(3, "counter", &100i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    d
}

fn bystander_total(d: &Device) -> i64 {
    let r: [i64; 2] = d.call(3, &0i64.to_le_bytes(), T).expect("bystander answers").decode().unwrap();
    r[0]
}

#[derive(Debug, Clone)]
enum Op {
    Create(u32, u32, Vec<u8>),
    Kill(u32),
    Restart(u32, u32),
    Drain(u32),
    Resume(u32),
    Raw(u32, u32, Option<u32>, u32),
    Send(u32, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    // Slot 3 is the bystander and is never aimed at; 4 and 5 are out of range.
    let target = prop_oneof![0u32..3, 4u32..6];
    prop_oneof![
        (target.clone(), 0u32..20, proptest::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(s, b, i)| Op::Create(s, b, i)),
        target.clone().prop_map(Op::Kill),
        (target.clone(), 0u32..20).prop_map(|(s, b)| Op::Restart(s, b)),
        target.clone().prop_map(Op::Drain),
        target.clone().prop_map(Op::Resume),
        (target.clone(), 0u32..12, proptest::option::of(0u32..5), 0u32..20)
            .prop_map(|(s, o, g, b)| Op::Raw(s, o, g, b)),
        (target.clone(), proptest::collection::vec(any::<u8>(), 0..200)).prop_map(|(s, p)| Op::Send(s, p)),
    ]
}

fn behaviour_name(d: &Device, id: u32) -> String {
    d.behaviours().name(ringvisor::device::BehaviourId(id)).map(str::to_string).unwrap_or_else(|| format!("nope{id}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn command_sequences_get_errors_not_panics_and_leave_the_bystander_alone(ops in proptest::collection::vec(op(), 1..24)) {
        let d = device();
        for op in ops {
            let _ = match op {
                Op::Create(s, b, init) => d.create(s, behaviour_name(&d, b).as_str(), &init).map(|p| drop(p.wait_blocking(T))),
                Op::Kill(s) => d.kill(s).map(|p| drop(p.wait_blocking(T))),
                Op::Restart(s, b) => d.restart(s, behaviour_name(&d, b).as_str(), &[]).map(|p| drop(p.wait_blocking(T))),
                Op::Drain(s) => d.drain(s).map(|p| drop(p.wait_blocking(T))),
                Op::Resume(s) => d.resume(s).map(|p| drop(p.wait_blocking(T))),
                Op::Raw(s, o, g, b) => {
                    let op = match o % 5 { 0 => CommandOp::Create, 1 => CommandOp::Kill, 2 => CommandOp::Restart, 3 => CommandOp::Drain, _ => CommandOp::Resume };
                    let req = CommandRequest { op, slot: s, expected_generation: g, behaviour: d.behaviours().id(&behaviour_name(&d, b)), init: Vec::new() };
                    d.submit(req).map(|p| drop(p.wait_blocking(T)))
                }
                Op::Send(s, p) => d.send(s, &p).map(drop),
            };
        }
        prop_assert_eq!(d.host_view(3).unwrap().1, SlotState::Active);
        prop_assert_eq!(bystander_total(&d), 100);
        d.shutdown();
    }

    #[test]
    fn arbitrary_payloads_are_processed_or_refused(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..160), 1..32)) {
        let d = device();
        d.create(0, "echo", &[]).unwrap().wait_blocking(T).unwrap();
        d.create(1, "kv", &[]).unwrap().wait_blocking(T).unwrap();
        for p in &payloads {
            for slot in [0, 1] {
                match d.call(slot, p, T) {
                    Ok(reply) => { let _ = reply.payload(); }
                    Err(e) => prop_assert!(p.len() > ringvisor::device::PAYLOAD_BYTES || matches!(e, ringvisor::device::DeviceError::ErrorReply { .. }), "{e}"),
                }
            }
        }
        prop_assert_eq!(bystander_total(&d), 100);
        d.shutdown();
    }

    #[test]
    fn arbitrary_spec_text_is_loaded_or_reported_never_a_panic(text in "[\\[\\]a-z_=\"0-9.{},\\n -]{0,300}") {
        let _ = SpecLoader::new().behaviours(["counter"]).load_str(&text);
    }

    #[test]
    fn arbitrary_spec_values_are_loaded_or_reported(
        strategy in "[a-z_]{0,20}", intensity in any::<i64>(), period in any::<f64>(),
        restart in "[a-z]{0,12}", shutdown in any::<i64>(), id in "[a-z/*?]{0,8}", name in "[a-z/*? ]{0,12}",
    ) {
        let text = format!(
            "[supervisor]\nstrategy = \"{strategy}\"\nintensity = {intensity}\nperiod = {period:?}\n[[supervisor.children]]\nid = \"{id}\"\ngpu = \"counter\"\nrestart = \"{restart}\"\nshutdown = {shutdown}\nname = \"{name}\"\n"
        );
        match SpecLoader::new().behaviours(["counter"]).load_str(&text) {
            Ok(spec) => prop_assert!(spec.validate().is_ok()),
            Err(errs) => prop_assert!(!errs.0.is_empty() && errs.0.iter().all(|e| !e.path.is_empty())),
        }
    }
}
