//! Where a thread index's slot is in every slot table: the buckets' layout
//! (see the `slots` module docs).

/// Thread indexes at or above `2^MAX_INDEX_LOG2` get no slot (their adds
/// take the owner's shared fallback): 65,535 threads at once.
#[cfg(not(shardcount_loom))]
const MAX_INDEX_LOG2: usize = 16;
/// Models use a handful of threads, and every bucket a walk visits is
/// another step for loom to explore.
#[cfg(shardcount_loom)]
const MAX_INDEX_LOG2: usize = 3;
/// Bucket 0 is never allocated (index 0 means "no index"); bucket `b >= 1`
/// holds indexes `2^(b-1) .. 2^b`.
pub(super) const BUCKETS: usize = MAX_INDEX_LOG2 + 1;
/// The bucket array's length: a power of two, so a mask keeps any bucket
/// number in range; the buckets from `BUCKETS` up are never allocated.
pub(super) const BUCKETS_POW2: usize = BUCKETS.next_power_of_two();

/// Debug builds check what `at`'s safety rests on.
#[inline(always)]
pub(super) fn assert_position(bucket: usize, offset: usize) {
    debug_assert!(bucket < BUCKETS && offset < bucket_len(bucket));
}

/// The bucket and offset of thread index `i` (`i >= 1`; 0 gives bucket 0).
pub(super) fn locate(i: usize) -> (usize, usize) {
    let b = (usize::BITS - i.leading_zeros()) as usize;
    (b, i - ((1usize << b) >> 1))
}

/// Where thread index `i`'s slot is in every table: `(bucket, offset)`,
/// with bucket 0 (never allocated) when `i` is 0 or beyond the tables'
/// reach. Threads keep it beside their index (`thread::slot_position`).
pub(crate) fn position(i: usize) -> (usize, usize) {
    match locate(i) {
        (b, off) if b < BUCKETS => (b, off),
        _ => (0, 0),
    }
}

/// How many slots bucket `b` holds.
pub(super) const fn bucket_len(b: usize) -> usize {
    if b == 0 {
        0
    } else {
        1 << (b - 1)
    }
}
