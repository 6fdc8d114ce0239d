//! What a histogram held at one read or take: bucket counts and the sum.

use super::layout::Layout;
use std::fmt;

/// The bucket counts and the sum of a [`Histogram`](crate::Histogram), as
/// read by [`snapshot`](crate::Histogram::snapshot) or moved out by
/// [`take`](crate::Histogram::take).
///
/// # Example
///
/// ```
/// let h = shardcount::Histogram::new();
/// for v in 1..=100 {
///     h.record(v);
/// }
/// let s = h.snapshot();
/// assert_eq!((s.count(), s.sum()), (100, 5050));
/// assert_eq!(s.quantile(0.5), Some(50));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    layout: Layout,
    counts: Vec<u64>,
    sum: u64,
}

/// One bucket of a [`HistogramSnapshot`]: the values `low..=high` and how many
/// records landed there.
///
/// ```
/// let h = shardcount::Histogram::with_bounds(&[10]);
/// h.record(3);
/// let b: Vec<_> = h.snapshot().buckets().collect();
/// assert_eq!((b[0].low, b[0].high, b[0].count), (0, 10, 1));
/// assert_eq!((b[1].low, b[1].high, b[1].count), (11, u64::MAX, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// The smallest value the bucket holds.
    pub low: u64,
    /// The largest value it holds (`u64::MAX` for the last bucket, which
    /// exporters write as `le="+Inf"`).
    pub high: u64,
    /// How many records landed in it.
    pub count: u64,
}

impl HistogramSnapshot {
    pub(crate) fn new(layout: Layout, counts: Vec<u64>, sum: u64) -> Self {
        debug_assert_eq!(counts.len(), layout.len());
        HistogramSnapshot {
            layout,
            counts,
            sum,
        }
    }

    /// How many records it holds: the buckets' counts added (modulo
    /// 2<sup>64</sup>).
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(7);
    /// assert_eq!(h.snapshot().count(), 1);
    /// ```
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0, |a, &c| a.wrapping_add(c))
    }

    /// The recorded values added, modulo 2<sup>64</sup> (as the
    /// histogram's [`sum`](crate::Histogram::sum)).
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(7);
    /// h.record(5);
    /// assert_eq!(h.snapshot().sum(), 12);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Whether it holds no record.
    ///
    /// ```
    /// assert!(shardcount::Histogram::new().snapshot().is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }

    /// Every bucket, in order of values, empty ones included (a default
    /// histogram has 976; filter on `count` for the others).
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(1000);
    /// let b: Vec<_> = h.snapshot().buckets().filter(|b| b.count > 0).collect();
    /// assert_eq!(b.len(), 1);
    /// assert!(b[0].low <= 1000 && 1000 <= b[0].high);
    /// ```
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.counts.iter().enumerate().map(|(i, &count)| {
            let (low, high) = self.layout.range(i);
            Bucket { low, high, count }
        })
    }

    /// The buckets as exporters write them, `(le, count)` with per-bucket
    /// (not yet cumulative) counts and `None` for `+Inf`: every bucket of
    /// user bounds; of the default 976, only those holding records, and
    /// the last (`+Inf`) always. Skipping empty buckets leaves every
    /// cumulative count exact.
    // Used by the integrations, each behind its feature.
    #[allow(dead_code)]
    pub(crate) fn le_buckets(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        let all = matches!(self.layout, Layout::Bounds(_));
        let last = self.counts.len() - 1;
        self.buckets()
            .enumerate()
            .filter(move |&(i, b)| all || b.count > 0 || i == last)
            .map(move |(i, b)| ((i != last).then_some(b.high), b.count))
    }

    /// `(representative, count)` of every bucket holding records: the
    /// value a quantile in it is answered with, and its count.
    // Used by the integrations, each behind its feature.
    #[allow(dead_code)]
    pub(crate) fn representatives(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c > 0)
            .map(|(i, &c)| (self.layout.representative(i), c))
    }

    /// The `q`-quantile, `None` when the snapshot is empty.
    ///
    /// The exact `q`-quantile of the records is the record of rank
    /// `ceil(q × count)` (at least 1) in increasing order: the smallest
    /// record with at least `q × count` records at or below it. This
    /// answers with a value from that record's bucket:
    ///
    /// * default buckets: the bucket's midpoint, within 1/32 of the exact
    ///   quantile (exact below 32; the proof is in the bucket layout's
    ///   source);
    /// * user bounds: the bucket's `le` bound, and for records above the
    ///   last bound that bound (as Prometheus' `histogram_quantile`), 0
    ///   with no bounds. No error bound beyond the buckets' widths.
    ///
    /// # Panics
    ///
    /// If `q` is NaN or outside `[0, 1]`, naming it.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// (1..=1000).for_each(|v| h.record(v));
    /// let p99 = h.snapshot().quantile(0.99).unwrap();
    /// assert!(p99.abs_diff(990) <= 990 / 32);
    /// assert_eq!(shardcount::Histogram::new().snapshot().quantile(0.5), None);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn quantile(&self, q: f64) -> Option<u64> {
        assert!(
            (0.0..=1.0).contains(&q),
            "shardcount: HistogramSnapshot::quantile: q must be within [0, 1], got {q}"
        );
        // u128: bucket counts cannot overflow it.
        let total: u128 = self.counts.iter().map(|&c| u128::from(c)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u128).clamp(1, total);
        let mut seen = 0u128;
        let mut last = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            seen += u128::from(c);
            last = i;
            if seen >= rank {
                break;
            }
        }
        Some(self.layout.representative(last))
    }

    /// Adds `other`'s counts and sum into this one (sums wrap), as if its
    /// records had been made here: to total a series of takes.
    ///
    /// # Panics
    ///
    /// If the two have different bucket layouts.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(3);
    /// let mut all = h.take();
    /// h.record(4);
    /// all.merge(&h.take());
    /// assert_eq!((all.count(), all.sum()), (2, 7));
    /// ```
    #[track_caller]
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        assert!(
            self.layout == other.layout,
            "shardcount: HistogramSnapshot::merge: the snapshots have different buckets \
             ({} and {} buckets, or other bounds)",
            self.counts.len(),
            other.counts.len()
        );
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.wrapping_add(*b);
        }
        self.sum = self.sum.wrapping_add(other.sum);
    }
}

impl fmt::Debug for HistogramSnapshot {
    /// The count, the sum and the number of buckets.
    ///
    /// ```
    /// let h = shardcount::Histogram::with_bounds(&[1]);
    /// h.record(2);
    /// assert_eq!(
    ///     format!("{:?}", h.snapshot()),
    ///     "HistogramSnapshot { count: 1, sum: 2, buckets: 2, .. }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistogramSnapshot")
            .field("count", &self.count())
            .field("sum", &self.sum)
            .field("buckets", &self.counts.len())
            .finish_non_exhaustive()
    }
}
