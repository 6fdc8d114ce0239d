//! A histogram snapshot's export (`histogram/snapshot.rs`), from
//! recorded histograms.

use crate::{Histogram, DEFAULT_LE};

/// The log-linear export closes a bucket exactly at each
/// `DEFAULT_LE` bound, whatever was recorded, and the counts between
/// are the recorded ones.
#[test]
fn the_default_export_has_the_documented_le_set_whatever_the_data() {
    let (a, b) = (Histogram::new(), Histogram::new());
    (0..1000u64).for_each(|v| a.record(v * v * 7919));
    b.record(3);
    let les = |h: &Histogram| -> Vec<Option<f64>> {
        h.snapshot().export_buckets().map(|(le, _)| le).collect()
    };
    let want: Vec<Option<f64>> = DEFAULT_LE
        .iter()
        .map(|&le| Some(le as f64))
        .chain([None])
        .collect();
    assert_eq!(les(&a), want);
    assert_eq!(les(&b), want);
    let counts: Vec<u64> = b.snapshot().export_buckets().map(|(_, n)| n).collect();
    assert_eq!(counts.iter().sum::<u64>(), 1);
    assert_eq!(counts[2], 1, "3 is in le=3");
}

/// Every written bound is the bound its cumulative count is for: a
/// record counts at or below an `le` exactly when it is at or below
/// the number written, up to the largest values (`2^k - 1` for `k`
/// from 54 up has no `f64`, and was written as `2^k`).
#[test]
fn every_exported_bound_counts_exactly_the_records_at_or_below_it() {
    let h = Histogram::new();
    let mut records: Vec<u64> = (40..64)
        .flat_map(|k| [(1 << k) - 1, 1 << k, (1 << k) + 1])
        .collect();
    records.extend([u64::MAX, 0, 1, 2, 1000]);
    records.iter().for_each(|&v| h.record(v));
    let mut cumulative = 0;
    for (le, n) in h.snapshot().export_buckets() {
        cumulative += n;
        let below = match le {
            Some(le) => {
                assert_eq!(le.fract(), 0.0, "{le}");
                records
                    .iter()
                    .filter(|&&v| u128::from(v) <= le as u128)
                    .count()
            }
            None => records.len(),
        };
        assert_eq!(cumulative, below as u64, "le = {le:?}");
    }
}

#[test]
fn seconds_export_divides_bounds_and_sum_by_a_billion() {
    let h = Histogram::with_duration_bounds(&[std::time::Duration::from_millis(5)]);
    h.record(5_000_000);
    h.record(5_000_001);
    let s = h.snapshot();
    let b: Vec<_> = s.export_buckets().collect();
    assert_eq!(b, [(Some(0.005), 1), (None, 1)]);
    assert_eq!(s.export_sum(), 0.010000001);
}
