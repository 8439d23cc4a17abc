//! Ring arithmetic: positions in the device's rings (inboxes, outboxes, the command and event rings, bulk areas)
//! are free-running `u32` counters that wrap, and a slot's generation wraps the same way. Every comparison of
//! two such counters goes through here, so "how many between" and "which is newer" mean one thing everywhere.

/// How many positions lie from `from` up to `to` (`to - from`, wrapping): the entries in flight between a
/// consumer at `from` and a producer at `to`.
pub(crate) fn distance(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from)
}

/// `a` is at or after `b` (within half the counter's range of each other).
pub(crate) fn at_or_after(a: u32, b: u32) -> bool {
    (distance(b, a) as i32) >= 0
}

/// `a` is strictly after `b` (within half the counter's range of each other).
pub(crate) fn after(a: u32, b: u32) -> bool {
    (distance(b, a) as i32) > 0
}

/// The position `len` before `end` (where a reservation ending at `end` starts).
pub(crate) fn back(end: u32, len: u32) -> u32 {
    end.wrapping_sub(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_hold_across_the_wrap() {
        assert_eq!(distance(u32::MAX - 1, 2), 4);
        assert!(at_or_after(2, u32::MAX - 1) && at_or_after(7, 7) && !at_or_after(u32::MAX - 1, 2));
        assert!(after(0, u32::MAX) && !after(5, 5) && !after(u32::MAX, 0));
        assert_eq!(back(3, 5), u32::MAX - 1);
    }
}
