//! Replaying a histogram's records into a recorder that takes one value
//! at a time (OpenTelemetry's SDK, the `metrics` facade): the values
//! recorded since the last replay, each inside the bucket it was counted
//! in, adding up to the recorded sum.

use super::snapshot::HistogramSnapshot;

/// What a replay keeps between calls for one histogram: the read it
/// replayed last, and the part of the recorded sum not yet replayed.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    last: Option<HistogramSnapshot>,
    /// Recorded sum minus replayed sum, modulo 2^64 (negative when a
    /// replay's values had to exceed it). A read that catches a record
    /// halfway (counted, not yet summed, or the reverse) gives values that
    /// cannot add up to its sum; the difference is carried here, and the
    /// replayed sum comes back to the recorded one as soon as later
    /// records leave room for it in their buckets.
    owed: u64,
}

/// Calls `f` with one value per record in `now` that the previous replay
/// (kept in `state`) did not hold, and keeps `now` in `state`; returns
/// how many. A bucket that fell means a take or reset since: the replay
/// starts over from `now` (a take whose buckets all refilled past their
/// old counts goes unseen; the integrations' docs forbid takes). The values add up to the sum recorded since,
/// plus what earlier replays owed, as far as their buckets allow.
// Used by the integrations, each behind its feature.
#[allow(dead_code)]
pub(crate) fn replay_since(
    state: &mut Replayed,
    now: HistogramSnapshot,
    mut f: impl FnMut(u64),
) -> u64 {
    let before = match state.last.take() {
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
    let target = now
        .sum()
        .wrapping_sub(before.as_ref().map_or(0, HistogramSnapshot::sum))
        .wrapping_add(state.owed);
    let ranges: Vec<(u64, u64)> = now.buckets().map(|b| (b.low, b.high)).collect();
    let mut n = 0;
    let mut replayed = 0u64;
    // Per bucket, the values `f` took (returned from).
    let mut handed = vec![0u64; counts.len()];
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        values(&ranges, &counts, target, |i, v| {
            f(v);
            n += 1;
            replayed = replayed.wrapping_add(v);
            handed[i] += 1;
        });
    }));
    if let Err(panic) = run {
        // `f` (the recorder) panicked: the next replay starts from what
        // was handed, so it hands the rest once (the value `f` panicked on
        // counts as not handed), not everything since the last whole one.
        if let Some(l) = &before {
            handed
                .iter_mut()
                .zip(l.buckets())
                .for_each(|(h, b)| *h += b.count);
        }
        let sum = before.as_ref().map_or(0, HistogramSnapshot::sum);
        state.last = Some(now.with_counts(handed, sum.wrapping_add(replayed)));
        std::panic::resume_unwind(panic);
    }
    state.owed = target.wrapping_sub(replayed);
    state.last = Some(now);
    n
}

/// Calls `f` with `counts[i]` values in `ranges[i]` (inclusive) for every
/// bucket, adding up to `sum` when the counts and the sum allow it: every
/// value starts at its bucket's low end, and what `sum` has beyond those
/// is handed out in turn, each value taking at most its bucket's width.
/// Otherwise (a read that caught a record halfway) the values stay in
/// their buckets and the sum is as close as they allow.
fn values(ranges: &[(u64, u64)], counts: &[u64], sum: u64, mut f: impl FnMut(usize, u64)) {
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
    for (i, (&(low, high), &c)) in ranges.iter().zip(counts).enumerate() {
        for _ in 0..c {
            let take = extra.min(u128::from(high - low));
            extra -= take;
            f(i, low + take as u64);
        }
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::{replay_since, values, Replayed};
    use crate::histogram::layout::Layout;
    use crate::histogram::snapshot::{HistogramSnapshot, HistogramUnit};

    /// A read with buckets `[0, 999]`, `[1000, 1999]` and above: `counts`
    /// and `sum`.
    fn read(counts: [u64; 3], sum: u64) -> HistogramSnapshot {
        let layout = Layout::bounds(&[999, 1999], "Histogram::with_bounds");
        HistogramSnapshot::new(layout, HistogramUnit::AsRecorded, counts.to_vec(), sum)
    }

    /// What a read caught halfway leaves unreplayed (or replayed twice)
    /// reaches a later replay, so the replayed sum comes back to the
    /// recorded one instead of staying off for good.
    #[test]
    fn a_record_caught_halfway_is_carried_to_the_next_replay() {
        let mut state = Replayed::default();
        let (mut count, mut total) = (0u64, 0u64);
        let mut replay = |state: &mut Replayed, now| {
            count += replay_since(state, now, |v| total += v);
            (count, total)
        };
        // A record of 1500 counted, its value not yet summed: the one value
        // must lie in its bucket, so 1000 goes out, 1000 over the read's sum.
        replay(&mut state, read([0, 1, 0], 0));
        // Now whole, no new record: nothing to carry the difference yet.
        replay(&mut state, read([0, 1, 0], 1500));
        // Two records of 1000: the room their bucket leaves carries it.
        let got = replay(&mut state, read([0, 3, 0], 1500 + 2 * 1000));
        assert_eq!(got, (3, 1500 + 2 * 1000));
        // The reverse: a value summed before its bucket is counted. The
        // first replay has no record to give it, the next one does.
        replay(&mut state, read([0, 3, 0], 1500 + 2 * 1000 + 1200));
        let got = replay(&mut state, read([1, 4, 0], 1500 + 2 * 1000 + 1200 + 10));
        assert_eq!(got, (5, 1500 + 2 * 1000 + 1200 + 10));
    }

    /// The values lie in their buckets and add up to the sum whenever the
    /// buckets allow it.
    #[test]
    fn replayed_values_stay_in_their_buckets_and_add_up_to_the_sum() {
        let ranges = [(0, 10), (11, 100), (101, 10_000)];
        let counts = [2, 3, 1];
        let mut got = Vec::new();
        values(&ranges, &counts, 7 + 9 + 50 + 60 + 70 + 5000, |_, v| {
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
        values(&ranges, &counts, 1, |_, v| got.push(v));
        assert_eq!(got, [0, 0, 11, 11, 11, 101]);
    }

    /// A replay whose recorder panics hands the rest at the next replay,
    /// once: neither everything since the last whole replay again, nor
    /// nothing.
    #[test]
    fn a_replay_the_recorder_panics_in_hands_the_rest_once() {
        let mut state = Replayed::default();
        let mut got = Vec::new();
        replay_since(&mut state, read([2, 0, 0], 10), |v| got.push(v));
        let now = read([3, 2, 0], 10 + 700 + 2 * 1000);
        let mut calls = 0;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            replay_since(&mut state, now.clone(), |v| {
                calls += 1;
                assert!(calls < 2, "the recorder panics on its second value");
                got.push(v);
            })
        }));
        assert!(panicked.is_err());
        replay_since(&mut state, now, |v| got.push(v));
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(got.iter().sum::<u64>(), 10 + 700 + 2 * 1000, "{got:?}");
    }
}
