//! The differential test: one seeded sequence of commands, messages, faults and bad input, driven step by step
//! through the CPU backend (the C protocol, compiled for the host) and the WebGPU backend (its WGSL port, on
//! lavapipe here). Every outcome must be the same on both: each command's event or error, each call's reply or
//! error, each state read, each rejected raw command's code, and at the end every slot's whole event sequence.
//! `protocol_mirror.rs` compares the two sources' shape; this compares what they do, so a branch ported
//! differently shows as the first step whose outcome differs, printed with its seed and a replay command.
//!
//! Every step waits for its own outcome before the next starts (a call for its reply, a command for its event,
//! a drain until the slot has stopped), so the sequence of outcomes depends on the seed alone, not on timing.
//! `RINGVISOR_DIFF_SEEDS=N` runs N seeds instead of the default few; `RINGVISOR_DIFF_SEED=S` replays one;
//! `RINGVISOR_DIFF_TRACE=1` prints each step, its outcome and its time (with `-- --nocapture`).

mod common;
use common::*;
use ringvisor_device::layout::{RawCommand, RV_INIT_BYTES, RV_OP_CREATE, RV_OP_KILL, RV_OP_RESUME};
use ringvisor_device::*;
use std::time::Duration;

const SLOTS: u32 = 4;
const STEPS: usize = 120;
const DEFAULT_SEEDS: u64 = 4;
/// The payload of a message that fails a `test` actor (its default poison value).
const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;
/// The command id of every raw command (the host never issues it).
const RAW_CMD_ID: u64 = 0xD1FF;
/// A behaviour id nothing registers.
const UNKNOWN_BEHAVIOUR: u32 = 200;

/// SplitMix64: small, seedable, the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn slot(&mut self) -> u32 {
        self.below(u64::from(SLOTS)) as u32
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// A malformed command, written raw: the device must reject it and change nothing.
#[derive(Clone, Copy, Debug)]
enum BadCommand {
    /// A create naming a behaviour nothing registers (rejected as a busy slot first if the slot is busy).
    UnknownBehaviour,
    /// A create whose init is longer than a command holds.
    InitTooLong,
    /// A kill naming a generation the slot is not at.
    StaleKill,
    /// An opcode that does not exist.
    UnknownOp,
    /// A resume of a slot that is not draining.
    ResumeNotDraining,
    /// A slot past the grid.
    SlotOutOfRange,
}

/// One step of a scenario.
#[derive(Clone, Debug)]
enum Step {
    Create {
        slot: u32,
        behaviour: &'static str,
        init: Vec<u8>,
    },
    Restart {
        slot: u32,
        behaviour: &'static str,
        init: Vec<u8>,
    },
    Kill {
        slot: u32,
    },
    /// Drain, then wait until the slot has stopped.
    Drain {
        slot: u32,
    },
    Call {
        slot: u32,
        payload: Vec<u8>,
    },
    /// One-way messages that fail no behaviour (the next call or state read shows their effect).
    Send {
        slot: u32,
        payloads: Vec<Vec<u8>>,
    },
    /// A fault, then the call it applies to.
    FaultedCall {
        slot: u32,
        fault: SlotFault,
        payload: Vec<u8>,
    },
    ReadState {
        slot: u32,
    },
    Raw {
        slot: u32,
        bad: BadCommand,
    },
    /// A create the host refuses before writing anything (unknown name, init too large).
    HostRefused {
        slot: u32,
        behaviour: &'static str,
        init_len: usize,
    },
}

/// A message for `behaviour`: counters add an i64, kv stores get and delete, echo and test echo bytes (some
/// large: over one envelope, through the bulk areas), test also fails on demand.
fn message(rng: &mut Rng, behaviour: &str) -> Vec<u8> {
    match behaviour {
        "counter" => (rng.below(1000) as i64 - 500).to_le_bytes().to_vec(),
        "kv" => {
            let mut m = Vec::with_capacity(24);
            m.extend_from_slice(&(1 + rng.below(3) as u32).to_le_bytes());
            m.extend_from_slice(&0u32.to_le_bytes());
            m.extend_from_slice(&rng.below(8).to_le_bytes());
            m.extend_from_slice(&rng.next().to_le_bytes());
            m
        }
        "test" => match rng.below(10) {
            0 => POISON.to_le_bytes().to_vec(),
            1 => test_msg(2, 7 + rng.below(5) as u32, 0),
            2 => test_msg(9, 0, 0), // an op the behaviour does not know: an error reply
            _ => {
                let mut m = test_msg(1, 0, 0);
                let len = rng.below(300) as usize;
                m.extend(rng.bytes(len));
                m
            }
        },
        _ => {
            let len = if rng.below(4) == 0 { 97 + rng.below(900) } else { rng.below(96) };
            rng.bytes(len as usize)
        }
    }
}

/// A one-way message for `behaviour` that fails nothing.
fn harmless(rng: &mut Rng, behaviour: &str) -> Vec<u8> {
    match behaviour {
        "test" => test_msg(1, 0, 0),
        _ => message(rng, behaviour),
    }
}

const BEHAVIOURS: [&str; 4] = ["echo", "counter", "kv", "test"];

/// The scenario of `seed`. The generator tracks which behaviour each slot was last asked to run, so that most
/// messages are ones that behaviour understands; what the device does with them is not predicted, only compared.
fn scenario(seed: u64) -> Vec<Step> {
    let mut rng = Rng(seed);
    let mut running: [&str; SLOTS as usize] = ["echo"; SLOTS as usize];
    let mut steps = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        let slot = rng.slot();
        let step = match rng.below(100) {
            0..=11 => {
                let behaviour = BEHAVIOURS[rng.below(4) as usize];
                running[slot as usize] = behaviour;
                Step::Create { slot, behaviour, init: init(&mut rng, behaviour) }
            }
            12..=17 => {
                let behaviour = BEHAVIOURS[rng.below(4) as usize];
                running[slot as usize] = behaviour;
                Step::Restart { slot, behaviour, init: init(&mut rng, behaviour) }
            }
            18..=22 => Step::Kill { slot },
            23..=25 => Step::Drain { slot },
            26..=60 => Step::Call { slot, payload: message(&mut rng, running[slot as usize]) },
            61..=70 => {
                let n = 1 + rng.below(4);
                Step::Send { slot, payloads: (0..n).map(|_| harmless(&mut rng, running[slot as usize])).collect() }
            }
            71..=77 => {
                let fault =
                    if rng.below(2) == 0 { SlotFault::CrashNextMessage } else { SlotFault::CorruptNextEnvelope };
                Step::FaultedCall { slot, fault, payload: harmless(&mut rng, running[slot as usize]) }
            }
            78..=84 => Step::ReadState { slot },
            85..=96 => {
                let bad = [
                    BadCommand::UnknownBehaviour,
                    BadCommand::InitTooLong,
                    BadCommand::StaleKill,
                    BadCommand::UnknownOp,
                    BadCommand::ResumeNotDraining,
                    BadCommand::SlotOutOfRange,
                ][rng.below(6) as usize];
                Step::Raw { slot, bad }
            }
            _ => {
                let (behaviour, init_len) = if rng.below(2) == 0 { ("nope", 0) } else { ("echo", 97) };
                Step::HostRefused { slot, behaviour, init_len }
            }
        };
        steps.push(step);
    }
    steps
}

/// An init for `behaviour`: a `test` actor gets its poison value's default, or an init that fails.
fn init(rng: &mut Rng, behaviour: &str) -> Vec<u8> {
    match (behaviour, rng.below(6)) {
        ("test", 0) => {
            let mut i = POISON.to_le_bytes().to_vec();
            i.extend_from_slice(&(-(1000 + rng.below(5) as i32)).to_le_bytes()); // the init fails with this code
            i
        }
        ("counter", _) => (rng.below(100) as i64).to_le_bytes().to_vec(),
        _ => Vec::new(),
    }
}

/// An event as both backends must report it (no times, no command ids).
fn event_line(e: &SlotEvent) -> String {
    let ev = &e.event;
    let undelivered: Vec<String> =
        e.undelivered.iter().map(|u| format!("{}:{:?}:{:?}", u.generation, u.reason, u.envelope.payload())).collect();
    // A Draining event carries the slot's state when block 0 published it: an actor with nothing left to take may
    // already have terminated by then (always on WebGPU, where the actor's step runs before block 0 looks again;
    // sometimes on the CPU). Both are the same outcome; the Drained event that follows says when it ended.
    let state = match (ev.kind, ev.state) {
        (EventKind::Draining, SlotState::Terminated) => SlotState::Draining,
        (_, state) => state,
    };
    format!(
        "{:?} slot {} gen {} {:?} code {:?} processed {} k2k_dropped {} undelivered {:?}",
        ev.kind, ev.slot, ev.generation, state, ev.code, ev.messages_processed, ev.k2k_dropped, undelivered
    )
}

fn command_line(r: Result<PendingCommand, DeviceError>) -> String {
    match r.and_then(|p| p.wait_blocking(T)) {
        Ok(e) => format!("ok {}", event_line(&e)),
        Err(e) => format!("error {e}"),
    }
}

fn reply_line(r: Result<Reply, DeviceError>) -> String {
    match r {
        Ok(reply) => format!("reply gen {} {:?}", reply.generation, reply.payload()),
        Err(e) => format!("error {e}"),
    }
}

fn raw(d: &Device, slot: u32, bad: BadCommand) -> RawCommand {
    let generation = d.snapshot(slot).map(|s| s.generation).unwrap_or(0);
    let mut cmd = RawCommand {
        op: RV_OP_CREATE,
        slot,
        expected_generation: generation,
        behaviour: UNKNOWN_BEHAVIOUR,
        cmd_id: RAW_CMD_ID,
        inbox_index: 0,
        init_len: 0,
        init: [0; RV_INIT_BYTES as usize],
    };
    match bad {
        BadCommand::UnknownBehaviour => {}
        BadCommand::InitTooLong => (cmd.behaviour, cmd.init_len) = (1, RV_INIT_BYTES + 1),
        BadCommand::StaleKill => (cmd.op, cmd.expected_generation) = (RV_OP_KILL, generation.wrapping_add(7)),
        BadCommand::UnknownOp => cmd.op = 99,
        BadCommand::ResumeNotDraining => cmd.op = RV_OP_RESUME,
        BadCommand::SlotOutOfRange => cmd.slot = SLOTS + slot,
    }
    cmd
}

/// The outcome of the raw command just written: its Rejected event (the host's own commands' rejections are
/// on the same stream, with their own command ids).
fn rejection(all: &Stream<SlotEvent>) -> String {
    loop {
        let e = next_event(all, EventKind::Rejected);
        if e.event.cmd_id == RAW_CMD_ID {
            return format!("rejected slot {} {:?}", e.event.slot, e.event.code);
        }
    }
}

/// Whether `slot`'s actor has failed (a message sent there waits for a restart nobody makes in this test).
fn failed(d: &Device, slot: u32) -> bool {
    d.snapshot(slot).unwrap().state == SlotState::Failed
}

/// One-way sends of `payloads` to `slot`: what each returned.
fn sends(d: &Device, slot: u32, payloads: &[Vec<u8>]) -> String {
    let sent: Vec<String> = payloads
        .iter()
        .map(|p| d.send(slot, p).map_or_else(|e| format!("error {e}"), |_| "sent".to_string()))
        .collect();
    sent.join(", ")
}

/// Runs `steps` on `d`: one outcome line per step, then every slot's event sequence.
fn run(d: &Device, steps: &[Step]) -> Vec<String> {
    let slot_events: Vec<Stream<SlotEvent>> = (0..SLOTS).map(|s| d.subscribe_slot(s).unwrap()).collect();
    let all = d.subscribe();
    let mut out = Vec::with_capacity(steps.len() + 64);
    for step in steps {
        let started = std::time::Instant::now();
        let line = match step {
            Step::Create { slot, behaviour, init } => command_line(d.create(*slot, *behaviour, init)),
            Step::Restart { slot, behaviour, init } => command_line(d.restart(*slot, *behaviour, init)),
            Step::Kill { slot } => command_line(d.kill(*slot)),
            Step::Drain { slot } => {
                let line = command_line(d.drain(*slot));
                eventually("the drain to finish", || d.snapshot(*slot).unwrap().state != SlotState::Draining);
                line
            }
            // a failed actor's inbox keeps what is sent to it until a restart or kill hands it back: a call there
            // would wait out its timeout, so the message is sent one way (its fate shows in that event)
            Step::Call { slot, payload } if failed(d, *slot) => sends(d, *slot, std::slice::from_ref(payload)),
            Step::Call { slot, payload } => reply_line(d.call(*slot, payload, T)),
            Step::Send { slot, payloads } => {
                let line = sends(d, *slot, payloads);
                eventually(&format!("the sends to be taken: {:?}", d.snapshot(*slot)), || {
                    let s = d.snapshot(*slot).unwrap();
                    s.inbox.0 == s.inbox.1 || s.state != SlotState::Active
                });
                line
            }
            Step::FaultedCall { slot, fault, payload } => {
                // armed only on a running actor, so that the call it is meant for is the message that meets it
                let state = d.snapshot(*slot).unwrap().state;
                if state == SlotState::Active {
                    d.inject(*slot, *fault).unwrap();
                    reply_line(d.call(*slot, payload, T))
                } else {
                    format!("not armed: {state:?}")
                }
            }
            // (a state read is a message too: it would wait for a restart)
            Step::ReadState { slot } if failed(d, *slot) => "not read: Failed".to_string(),
            Step::ReadState { slot } => match d.read_state(*slot, T) {
                Ok(bytes) => format!("state {bytes:?}"),
                Err(e) => format!("error {e}"),
            },
            Step::Raw { slot, bad } => match d.submit_raw_command(raw(d, *slot, *bad)) {
                Ok(()) => rejection(&all),
                Err(e) => format!("error {e}"),
            },
            Step::HostRefused { slot, behaviour, init_len } => {
                command_line(d.create(*slot, *behaviour, &vec![0; *init_len]))
            }
        };
        if std::env::var_os("RINGVISOR_DIFF_TRACE").is_some() {
            eprintln!("{:?} {step:?} -> {line}", started.elapsed());
        }
        out.push(line);
    }
    for (slot, events) in slot_events.iter().enumerate() {
        while let Some(e) = events.recv_timeout(Duration::from_millis(50)) {
            out.push(format!("slot {slot} event: {}", event_line(&e)));
        }
    }
    out
}

fn config() -> DeviceConfig {
    DeviceConfig::default().slots(SLOTS).inbox_capacity(16).bulk_bytes(4096).state_bytes(256)
}

fn cpu_outcomes(steps: &[Step]) -> Vec<String> {
    run(&Device::open(config().backend(Backend::Cpu(CpuConfig::default()))).expect("CPU device"), steps)
}

#[cfg(feature = "wgpu")]
fn wgpu_outcomes(steps: &[Step], edit: Option<ProgramEdit>) -> Vec<String> {
    let backend = Backend::Wgpu(WgpuConfig { program_edit: edit, ..WgpuConfig::default() });
    run(&Device::open(config().backend(backend)).expect("wgpu device"), steps)
}

/// The first step (or event line) whose outcome differs, with both outcomes and the step.
fn first_difference(steps: &[Step], a: &[String], b: &[String]) -> Option<String> {
    let n = a.len().max(b.len());
    (0..n).find(|&i| a.get(i) != b.get(i)).map(|i| {
        let what =
            steps.get(i).map_or_else(|| "the slots' event sequences".to_string(), |s| format!("step {i}: {s:?}"));
        format!("{what}\n  CPU:  {:?}\n  WGSL: {:?}", a.get(i), b.get(i))
    })
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("RINGVISOR_DIFF_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = std::env::var("RINGVISOR_DIFF_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEEDS);
    (0..n).map(|i| 0x5EED_0000 + i).collect()
}

#[cfg(feature = "wgpu")]
#[test]
fn the_cpu_and_webgpu_backends_answer_one_seeded_sequence_alike() {
    if !wgpu_or_skip() {
        return;
    }
    let mut seen = String::new();
    for seed in seeds() {
        let steps = scenario(seed);
        let (cpu, wgsl) = (cpu_outcomes(&steps), wgpu_outcomes(&steps, None));
        if let Some(diff) = first_difference(&steps, &cpu, &wgsl) {
            panic!(
                "seed {seed}: the backends differ at {diff}\nreplay: RINGVISOR_DIFF_SEED={seed} cargo test -p \
                 ringvisor-device --test differential"
            );
        }
        seen.push_str(&cpu.join("\n"));
    }
    // the scenarios reached what they are for: failures, rejections, replies, kills and creations
    for what in ["Failed", "rejected", "reply gen", "Killed", "Created", "InFlightAtCrash", "BadEnvelope"] {
        assert!(seen.contains(what), "no `{what}` outcome in any seed");
    }
}

/// The planted divergence: WGSL block 0 checks a create's init before the slot's state (the C code checks the
/// state first), so a create on a busy slot naming an unknown behaviour is rejected with another code.
#[cfg(feature = "wgpu")]
fn check_init_before_state(source: String) -> String {
    let state_check = "if (state != RV_STATE_DORMANT && state != RV_STATE_TERMINATED) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }";
    let init_check = "let rc = rv_init_valid();\n            if (rc != RV_OK) { rv_reject(rc); return; }";
    let at = source.find(state_check).expect("the create's state check");
    assert!(source[at..].starts_with(&format!("{state_check}\n            {init_check}")), "the create's checks moved");
    source.replacen(
        &format!("{state_check}\n            {init_check}"),
        &format!("{init_check}\n            {state_check}"),
        1,
    )
}

#[cfg(feature = "wgpu")]
#[test]
fn a_check_reordered_in_the_wgsl_protocol_is_found() {
    if !wgpu_or_skip() {
        return;
    }
    // a scenario that meets the reordered checks: a running slot, then a create of an unknown behaviour on it
    let steps = vec![
        Step::Create { slot: 0, behaviour: "echo", init: vec![] },
        Step::Call { slot: 0, payload: b"ping".to_vec() },
        Step::Raw { slot: 0, bad: BadCommand::UnknownBehaviour },
        Step::Call { slot: 0, payload: b"pong".to_vec() },
    ];
    let cpu = cpu_outcomes(&steps);
    assert_eq!(first_difference(&steps, &cpu, &wgpu_outcomes(&steps, None)), None, "unplanted, they agree");
    let planted = wgpu_outcomes(&steps, Some(ProgramEdit(check_init_before_state)));
    let diff = first_difference(&steps, &cpu, &planted).expect("the planted divergence is found");
    assert!(diff.starts_with("step 2"), "{diff}");
    assert!(diff.contains("IllegalTransition") && diff.contains("UnknownBehaviour"), "{diff}");
}

#[test]
fn scenarios_are_the_same_for_a_seed_and_cover_every_kind_of_step() {
    let a = format!("{:?}", scenario(7));
    assert_eq!(a, format!("{:?}", scenario(7)));
    assert_ne!(a, format!("{:?}", scenario(8)));
    for kind in ["Create", "Restart", "Kill", "Drain", "Call", "Send", "FaultedCall", "ReadState", "Raw", "HostRefused"]
    {
        assert!(a.contains(&format!("{kind} {{")), "no {kind} step in {a}");
    }
}
