//! Replaying a histogram's records into a recorder that takes one value
//! at a time (OpenTelemetry's SDK, the `metrics` facade): the values
//! recorded since the last replay, each inside the bucket it was counted
//! in, adding up to the recorded sum.

use super::HistogramSnapshot;

/// Calls `f` with one value per record in `now` that `last` (the previous
/// replay's read of the same histogram, if any) did not hold, and keeps
/// `now` in `last`; returns how many. A bucket that fell means a take or
/// reset since: the replay starts over from `now`.
// Used by the integrations, each behind its feature.
#[allow(dead_code)]
pub(crate) fn replay_since(
    last: &mut Option<HistogramSnapshot>,
    now: HistogramSnapshot,
    mut f: impl FnMut(u64),
) -> u64 {
    let before = match last.take() {
        Some(l)
            if now
                .buckets()
                .zip(l.buckets())
                .all(|(a, b)| a.count >= b.count) =>
        {
            Some(l)
        }
        _ => None,
    };
    let counts: Vec<u64> = match &before {
        Some(l) => now
            .buckets()
            .zip(l.buckets())
            .map(|(a, b)| a.count - b.count)
            .collect(),
        None => now.buckets().map(|b| b.count).collect(),
    };
    let sum = now
        .sum()
        .wrapping_sub(before.as_ref().map_or(0, HistogramSnapshot::sum));
    let ranges: Vec<(u64, u64)> = now.buckets().map(|b| (b.low, b.high)).collect();
    let mut n = 0;
    values(&ranges, &counts, sum, |v| {
        n += 1;
        f(v);
    });
    *last = Some(now);
    n
}

/// Calls `f` with `counts[i]` values in `ranges[i]` (inclusive) for every
/// bucket, adding up to `sum` when the counts and the sum allow it: every
/// value starts at its bucket's low end, and what `sum` has beyond those
/// is handed out in turn, each value taking at most its bucket's width.
/// Otherwise (a read that caught a record halfway) the values stay in
/// their buckets and the sum is as close as they allow.
fn values(ranges: &[(u64, u64)], counts: &[u64], sum: u64, mut f: impl FnMut(u64)) {
    let base: u128 = ranges
        .iter()
        .zip(counts)
        .map(|(&(low, _), &c)| u128::from(low) * u128::from(c))
        .sum();
    let room: u128 = ranges
        .iter()
        .zip(counts)
        .map(|(&(low, high), &c)| u128::from(high - low) * u128::from(c))
        .sum();
    // The sum is modulo 2^64: of the sums it stands for, the first at or
    // above `base`; past `room`, the nearer of `base` and `base + room`.
    let mut extra = u128::from(sum.wrapping_sub(base as u64));
    if extra > room {
        let below = (1u128 << 64) - extra;
        extra = if extra - room > below { 0 } else { room };
    }
    for (&(low, high), &c) in ranges.iter().zip(counts) {
        for _ in 0..c {
            let take = extra.min(u128::from(high - low));
            extra -= take;
            f(low + take as u64);
        }
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::values;

    /// The values lie in their buckets and add up to the sum whenever the
    /// buckets allow it.
    #[test]
    fn replayed_values_stay_in_their_buckets_and_add_up_to_the_sum() {
        let ranges = [(0, 10), (11, 100), (101, 10_000)];
        let counts = [2, 3, 1];
        let mut got = Vec::new();
        values(&ranges, &counts, 7 + 9 + 50 + 60 + 70 + 5000, |v| {
            got.push(v)
        });
        assert_eq!(got.len(), 6);
        assert_eq!(got.iter().sum::<u64>(), 5196);
        for (v, i) in got.iter().zip([0, 0, 1, 1, 1, 2]) {
            assert!(
                (ranges[i].0..=ranges[i].1).contains(v),
                "{v} outside bucket {i}"
            );
        }
        // A sum the buckets cannot make: each value still in its bucket.
        got.clear();
        values(&ranges, &counts, 1, |v| got.push(v));
        assert_eq!(got, [0, 0, 11, 11, 11, 101]);
    }
}
