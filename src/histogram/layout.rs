//! Which bucket a value lands in: the default log-linear layout, or
//! user-given `le` bounds.
//!
//! # Log-linear buckets, and the error bound
//!
//! With `K = 16` sub-buckets per power of two, value `v` goes to bucket
//!
//! ```text
//! e     = msb(v | 16)          (the top set bit's position, at least 4)
//! shift = e - 4
//! index = shift * 16 + (v >> shift)
//! ```
//!
//! * `v < 32`: `shift = 0`, `index = v`: one bucket per value, exact.
//! * `v >= 32`: `v >> shift` has its top bit at position 4, so it is a
//!   *top* in `16..32`, and the bucket holds exactly the values whose top
//!   five bits are that top: `[top << shift, ((top + 1) << shift) - 1]`.
//!   Consecutive values give the same or the next index (a top of 31 is
//!   followed by 16 at the next shift, and `shift * 16 + 31 + 1 =
//!   (shift + 1) * 16 + 16`), so the buckets tile `0..=u64::MAX` in order,
//!   ending at `59 * 16 + 31 = 975`: 976 buckets.
//!
//! The error bound: a bucket of `shift = s >= 1` has width `2^s` and lower
//! bound `top << s >= 16 * 2^s`, so any value `x` in it is at least `2^(s+4)`.
//! Its midpoint `m = low + (2^s - 1) / 2` (rounded down) is within
//! `2^(s-1)` of every `x` in the bucket, so `|m - x| / x <= 2^(s-1) /
//! 2^(s+4) = 1/32`. A quantile answered by its bucket's midpoint is
//! therefore within 1/32 of the exact sample it stands for (and exact
//! below 32).

use std::sync::Arc;
use std::time::Duration;

/// Sub-buckets per power of two (the `K` above).
pub(crate) const SUB_BUCKETS: usize = 16;
/// How many log-linear buckets there are.
pub(crate) const LOG_LINEAR_BUCKETS: usize = 60 * SUB_BUCKETS + SUB_BUCKETS;

/// The log-linear bucket of `v` (see the module docs): a few instructions,
/// no branch.
#[inline(always)]
pub(crate) fn log_linear_index(v: u64) -> usize {
    let e = 63 - (v | SUB_BUCKETS as u64).leading_zeros();
    let shift = e - 4;
    ((shift as usize) << 4) + (v >> shift) as usize
}

/// The inclusive bounds of log-linear bucket `i < LOG_LINEAR_BUCKETS`.
pub(crate) fn log_linear_bounds(i: usize) -> (u64, u64) {
    debug_assert!(i < LOG_LINEAR_BUCKETS);
    if i < 2 * SUB_BUCKETS {
        return (i as u64, i as u64);
    }
    let shift = (i / SUB_BUCKETS - 1) as u32;
    let top = (i % SUB_BUCKETS + SUB_BUCKETS) as u128;
    let low = top << shift;
    let high = ((top + 1) << shift) - 1;
    // At most 2^64 - 1: the last top is 31 at shift 59.
    (low as u64, high as u64)
}

/// The bucket layout of a histogram (and of its snapshots).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// [`LOG_LINEAR_BUCKETS`] buckets, as the module docs say.
    LogLinear,
    /// Strictly increasing `le` bounds: bucket `i` holds the values in
    /// `bounds[i - 1] + 1 ..= bounds[i]`, and one more bucket, the
    /// overflow, the values above the last bound.
    Bounds(Arc<[u64]>),
}

/// Panics unless `bounds` increase strictly, naming the first bad one (as
/// the user wrote it) and `from`, the constructor the user called.
#[track_caller]
fn assert_increasing<T: PartialOrd + std::fmt::Debug>(bounds: &[T], from: &str) {
    for (i, w) in bounds.windows(2).enumerate() {
        assert!(
            w[0] < w[1],
            "shardcount: {from}: the bounds must increase strictly, \
             but bound {} ({:?}) is not above bound {i} ({:?})",
            i + 1,
            w[1],
            w[0]
        );
    }
}

impl Layout {
    /// Checks user bounds, naming the first bad one and `from`, the
    /// constructor the user called.
    #[track_caller]
    pub(crate) fn bounds(bounds: &[u64], from: &str) -> Layout {
        assert_increasing(bounds, from);
        // The overflow bucket starts one above the last bound.
        assert!(
            bounds.last() != Some(&u64::MAX),
            "shardcount: {from}: a bound of u64::MAX would leave no value \
             for the +Inf bucket: leave it out (+Inf holds every value above the last bound)"
        );
        Layout::Bounds(bounds.into())
    }

    /// Checks duration bounds as durations (so a message shows what the
    /// user wrote), then keeps them in nanoseconds: each must be below
    /// `u64::MAX` ns (about 584 years), which is the `+Inf` bucket's.
    #[track_caller]
    pub(crate) fn duration_bounds(bounds: &[Duration], from: &str) -> Layout {
        assert_increasing(bounds, from);
        let ns: Vec<u64> = bounds
            .iter()
            .enumerate()
            .map(|(i, d)| match u64::try_from(d.as_nanos()) {
                Ok(ns) if ns < u64::MAX => ns,
                _ => panic!(
                    "shardcount: {from}: bound {i} ({d:?}) is not below u64::MAX ns \
                     (about 584 years), which the +Inf bucket holds: leave it out"
                ),
            })
            .collect();
        Layout::Bounds(ns.into())
    }

    /// How many buckets the layout has.
    pub(crate) fn len(&self) -> usize {
        match self {
            Layout::LogLinear => LOG_LINEAR_BUCKETS,
            Layout::Bounds(b) => b.len() + 1,
        }
    }

    /// The bucket `v` lands in.
    #[inline(always)]
    pub(crate) fn index(&self, v: u64) -> usize {
        match self {
            Layout::LogLinear => log_linear_index(v),
            // The first bound at or above `v`; past the last: the overflow.
            Layout::Bounds(b) => b.partition_point(|&le| le < v),
        }
    }

    /// The inclusive bounds of bucket `i < len()`.
    pub(crate) fn range(&self, i: usize) -> (u64, u64) {
        match self {
            Layout::LogLinear => log_linear_bounds(i),
            Layout::Bounds(b) => {
                let low = match i {
                    0 => 0,
                    _ => b[i - 1] + 1,
                };
                (low, b.get(i).copied().unwrap_or(u64::MAX))
            }
        }
    }

    /// The value a quantile in bucket `i` is answered with: the midpoint
    /// for log-linear buckets (see the module docs); for user bounds the
    /// bucket's `le`, and for the overflow the last bound (as Prometheus'
    /// `histogram_quantile` does; 0 with no bounds).
    pub(crate) fn representative(&self, i: usize) -> u64 {
        let (low, high) = self.range(i);
        match self {
            Layout::LogLinear => low + (high - low) / 2,
            Layout::Bounds(b) if i == b.len() => b.last().copied().unwrap_or(0),
            Layout::Bounds(_) => high,
        }
    }
}

// Not under miri either: its build leaves the dev-dependencies out
// (Cargo.toml), and these use proptest.
#[cfg(all(test, not(shardcount_loom), not(miri)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A plain reference: walk the buckets' bounds until one contains `v`.
    fn reference_index(v: u64) -> usize {
        (0..LOG_LINEAR_BUCKETS)
            .find(|&i| {
                let (low, high) = log_linear_bounds(i);
                low <= v && v <= high
            })
            .expect("the buckets cover every u64")
    }

    #[test]
    fn the_buckets_tile_the_u64_range_in_order() {
        let mut next = 0u64;
        for i in 0..LOG_LINEAR_BUCKETS {
            let (low, high) = log_linear_bounds(i);
            assert_eq!(low, next, "bucket {i} does not start where {} ended", i - 1);
            assert!(low <= high, "bucket {i} is empty");
            assert_eq!(log_linear_index(low), i);
            assert_eq!(log_linear_index(high), i);
            next = high.wrapping_add(1);
        }
        assert_eq!(next, 0, "the last bucket does not end at u64::MAX");
    }

    #[test]
    fn each_bucket_is_at_most_a_sixteenth_of_its_values() {
        for i in 0..LOG_LINEAR_BUCKETS {
            let (low, high) = log_linear_bounds(i);
            let mid = Layout::LogLinear.representative(i);
            for x in [low, high] {
                let err = mid.abs_diff(x) as f64;
                assert!(err <= x as f64 / 32.0, "bucket {i}: {mid} vs {x}");
            }
            assert!((high - low) as f64 <= low as f64 / 16.0 || high < 32);
        }
    }

    #[test]
    #[should_panic(expected = "a bound of u64::MAX")]
    fn a_bound_of_u64_max_is_refused() {
        let _ = Layout::bounds(&[10, u64::MAX], "Histogram::with_bounds");
    }

    #[test]
    fn the_largest_bound_below_u64_max_walks_every_bucket() {
        let l = Layout::bounds(&[10, u64::MAX - 1], "Histogram::with_bounds");
        assert_eq!(
            (l.range(1), l.range(2)),
            ((11, u64::MAX - 1), (u64::MAX, u64::MAX))
        );
        assert_eq!((l.index(u64::MAX - 1), l.index(u64::MAX)), (1, 2));
    }

    #[test]
    fn bounds_take_le_semantics() {
        let l = Layout::bounds(&[10, 20], "Histogram::with_bounds");
        let want = [(0, 0), (10, 0), (11, 1), (20, 1), (21, 2), (u64::MAX, 2)];
        for (v, i) in want {
            assert_eq!(l.index(v), i, "{v}");
        }
        assert_eq!(l.range(1), (11, 20));
        assert_eq!(l.range(2), (21, u64::MAX));
        assert_eq!(l.representative(2), 20);
    }

    #[test]
    #[should_panic(expected = "bound 2 (5) is not above bound 1 (7)")]
    fn bounds_name_the_first_bad_one() {
        let _ = Layout::bounds(&[1, 7, 5], "Histogram::with_bounds");
    }

    /// Duration bounds are checked as the durations given, by the
    /// constructor called, before any saturates to `u64::MAX` ns.
    #[test]
    fn duration_bounds_name_the_durations_and_the_caller() {
        let message = |b: &[Duration]| {
            let caught = std::panic::catch_unwind(|| Layout::duration_bounds(b, "H::d"));
            let Err(e) = caught else {
                panic!("bad bounds must panic")
            };
            e.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let (s, ms) = (Duration::from_secs(1), Duration::from_millis(1));
        assert!(message(&[s, ms]).starts_with("shardcount: H::d: "));
        assert!(message(&[s, ms]).contains("bound 1 (1ms) is not above bound 0 (1s)"));
        let huge = Duration::from_secs(u64::MAX / 2);
        assert!(message(&[s, huge, Duration::MAX]).contains("bound 1 ("));
        assert!(message(&[s, huge, Duration::MAX]).contains("584 years"));
        assert!(
            Layout::duration_bounds(&[ms, s], "H::d")
                == Layout::Bounds([1_000_000, 1_000_000_000].into())
        );
    }

    proptest! {
        /// Values spread over every magnitude: a random top bit, then
        /// random bits below it.
        #[test]
        fn index_matches_the_reference(bits in 0u32..=64, low in any::<u64>()) {
            let v = match bits {
                0 => 0,
                _ => {
                    let top = 1u64 << (bits - 1);
                    top | (low & (top - 1))
                }
            };
            let i = log_linear_index(v);
            prop_assert_eq!(i, reference_index(v));
            let (lo, hi) = log_linear_bounds(i);
            prop_assert!(lo <= v && v <= hi);
        }

        #[test]
        fn index_is_monotone(a in any::<u64>(), b in any::<u64>()) {
            let (a, b) = (a.min(b), a.max(b));
            prop_assert!(log_linear_index(a) <= log_linear_index(b));
        }
    }
}
