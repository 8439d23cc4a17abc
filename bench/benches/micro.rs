//! Micro benchmarks (criterion): the host-side pieces on the message path, without a kernel.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ringvisor::device::Envelope;
use ringvisor::supervisor::{DeadLetterReason, DeadLetters, Origin, OverflowPolicy};

fn envelope(c: &mut Criterion) {
    let payload = [7u8; 64];
    c.bench_function("Envelope::to_actor, 64 B", |b| b.iter(|| Envelope::to_actor(3, 42, black_box(&payload), true)));
}

fn dead_letters(c: &mut Criterion) {
    let q = DeadLetters::new(1024, OverflowPolicy::DropOldest);
    c.bench_function("DeadLetters::push (full queue, evicting)", |b| {
        b.iter(|| q.push(DeadLetterReason::Poison, Origin::Host, None, Some(1), black_box(vec![1, 2, 3])))
    });
}

criterion_group!(micro, envelope, dead_letters);
criterion_main!(micro);
