//! What a histogram held at one read or take: bucket counts and the sum.

use super::layout::Layout;
use std::fmt;
use std::time::Duration;

/// The `le` bounds the default log-linear buckets are exported with, in
/// the recorded unit: `2^k - 1` for `k` in `0..54`, each the top of a
/// log-linear bucket (so a cumulative count at it is exact) and each an
/// integer that `f64` holds exactly, so the written bound is the bound;
/// then `+Inf`, which holds every record from `2^53` up (`2^54 - 1` and
/// above have no `f64` of their own: `2^54 - 1` would be written as
/// `2^54`, over a count that leaves out `2^54`). Fixed, whatever was
/// recorded: every replica exports the same 55 `_bucket` series, and
/// `sum by (le)` adds like with like.
///
/// ```
/// use shardcount::DEFAULT_LE;
/// assert_eq!((DEFAULT_LE.len(), DEFAULT_LE[3], DEFAULT_LE[53]), (54, 7, (1 << 53) - 1));
/// ```
pub const DEFAULT_LE: [u64; 54] = {
    let mut le = [0u64; 54];
    let mut k = 0;
    while k < 54 {
        le[k] = (1u64 << k) - 1;
        k += 1;
    }
    le
};

/// The `le` bounds a duration histogram with the default log-linear
/// buckets ([`Histogram::for_durations`](crate::Histogram::for_durations),
/// timers) is exported with: 1, 2.5 and 5 per decade from 100 µs to 10 s,
/// 16 bounds, then `+Inf`. They hold Prometheus's default bounds
/// (0.005 to 10 s, every SLO query's `le="0.1"` and `le="1"`) and five
/// more below 5 ms for in-process work; 17 `_bucket` series per label set
/// instead of 55.
///
/// The internal buckets stay log-linear (quantiles within 1/32), so a
/// round bound usually falls inside one: the count at a bound is every
/// record in the buckets that end at or below it, never a record above
/// it, and may leave out records less than 1/16 below it (at most 3.6%
/// for these 16 bounds: 96.5 to 100 ms miss `le="0.1"`); they count at
/// the next bound. For exact counts at bounds of your own, use
/// [`with_duration_bounds`](crate::Histogram::with_duration_bounds).
///
/// ```
/// use shardcount::DEFAULT_DURATION_LE;
/// use std::time::Duration;
/// assert_eq!(DEFAULT_DURATION_LE.len(), 16);
/// assert_eq!(DEFAULT_DURATION_LE[6], Duration::from_millis(10));
/// assert!(DEFAULT_DURATION_LE.contains(&Duration::from_millis(100)));
/// ```
pub const DEFAULT_DURATION_LE: [Duration; 16] = {
    let mut le = [Duration::ZERO; 16];
    let mut decade = 100_000u64; // 100 us, in ns
    let mut i = 0;
    while i < 16 {
        le[i] = Duration::from_nanos(match i % 3 {
            0 => decade,
            1 => decade * 5 / 2,
            _ => decade * 5,
        });
        if i % 3 == 2 {
            decade *= 10;
        }
        i += 1;
    }
    le
};

/// Every integer up to this one is an `f64`, so a bound up to it is
/// written exactly.
pub(crate) const F64_EXACT: u64 = 1 << 53;

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
    unit: HistogramUnit,
    counts: Vec<u64>,
    sum: u64,
}

/// What a histogram's values are, for the integrations that export it:
/// set by its constructor, read with [`Histogram::unit`](crate::Histogram::unit).
///
/// ```
/// use shardcount::{Histogram, HistogramUnit};
/// let h = Histogram::for_durations();
/// h.record_duration(std::time::Duration::from_millis(250));
/// assert_eq!(h.snapshot().unit(), HistogramUnit::Seconds);
/// assert_eq!(HistogramUnit::Seconds.per_recorded(), 1e-9);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HistogramUnit {
    /// Exported as recorded: `le` bounds, the sum and any suffix are the
    /// user's (bytes, items, or nanoseconds written as such).
    AsRecorded,
    /// Durations, recorded in nanoseconds
    /// ([`record_duration`](crate::Histogram::record_duration), timers)
    /// and exported in seconds: `le` bounds and the sum divided by 10^9,
    /// under a name ending in `_seconds`.
    Seconds,
}

impl HistogramUnit {
    /// What one recorded unit is in the exported unit: 1, or 10^-9 for
    /// seconds.
    ///
    /// ```
    /// assert_eq!(shardcount::HistogramUnit::AsRecorded.per_recorded(), 1.0);
    /// ```
    #[must_use]
    pub fn per_recorded(self) -> f64 {
        match self {
            HistogramUnit::AsRecorded => 1.0,
            HistogramUnit::Seconds => 1e-9,
        }
    }

    /// `v` recorded units in the exported unit (a division for seconds, so
    /// `1_000_000` ns is exactly `0.001`).
    pub(crate) fn export(self, v: u64) -> f64 {
        match self {
            HistogramUnit::AsRecorded => v as f64,
            HistogramUnit::Seconds => v as f64 / 1e9,
        }
    }
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
    /// Makes this snapshot one of `layout` and `unit` whose counts and sum
    /// `fill` writes (given zeroed), reusing the counts' buffer: no
    /// allocation when it already holds `layout.len()` counts.
    pub(crate) fn refill(
        &mut self,
        layout: &Layout,
        unit: HistogramUnit,
        fill: impl FnOnce(&mut [u64], &mut u64),
    ) {
        if self.layout != *layout {
            self.layout = layout.clone();
        }
        self.unit = unit;
        self.counts.clear();
        self.counts.resize(layout.len(), 0);
        self.sum = 0;
        fill(&mut self.counts, &mut self.sum);
    }

    /// A snapshot of this one's layout and unit holding `counts` and `sum`.
    // Used by the integrations' replays, each behind its feature.
    #[allow(dead_code)]
    pub(crate) fn with_counts(&self, counts: Vec<u64>, sum: u64) -> Self {
        Self::new(self.layout.clone(), self.unit, counts, sum)
    }

    pub(crate) fn new(layout: Layout, unit: HistogramUnit, counts: Vec<u64>, sum: u64) -> Self {
        debug_assert_eq!(counts.len(), layout.len());
        HistogramSnapshot {
            layout,
            unit,
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

    /// The unit the histogram's integrations export it in.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// assert_eq!(h.snapshot().unit(), shardcount::HistogramUnit::AsRecorded);
    /// ```
    #[must_use]
    pub fn unit(&self) -> HistogramUnit {
        self.unit
    }

    /// The buckets as exporters write them: `(le, count)` with per-bucket
    /// (not yet cumulative) counts, `le` in the exported
    /// [`unit`](Self::unit) and `None` for `+Inf`. The set of `le` bounds
    /// depends on the layout and unit only, never on the data, so every
    /// replica exports the same one:
    ///
    /// * user bounds: each bound, then `+Inf`;
    /// * the default log-linear buckets of a duration histogram
    ///   ([`HistogramUnit::Seconds`]): [`DEFAULT_DURATION_LE`], 16 round
    ///   bounds from 100 µs to 10 s, then `+Inf` (see there how a count at
    ///   a round bound is made);
    /// * the default log-linear buckets otherwise: [`DEFAULT_LE`], the 54
    ///   bounds `2^k - 1` for `k` in `0..54` (0, 1, 3, 7, ..., each the top
    ///   of a log-linear bucket, so every cumulative count is exact, and
    ///   each written exactly), then `+Inf`.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(5);
    /// let b: Vec<_> = h.snapshot().export_buckets().collect();
    /// assert_eq!(b.len(), 55);
    /// assert_eq!(&b[..4], [(Some(0.0), 0), (Some(1.0), 0), (Some(3.0), 0), (Some(7.0), 1)]);
    /// assert_eq!(b[54], (None, 0));
    ///
    /// let d = shardcount::Histogram::for_durations();
    /// d.record_duration(std::time::Duration::from_millis(7));
    /// let b: Vec<_> = d.snapshot().export_buckets().collect();
    /// assert_eq!(b.len(), 17);
    /// assert_eq!(&b[5..8], [(Some(0.005), 0), (Some(0.01), 1), (Some(0.025), 0)]);
    /// ```
    pub fn export_buckets(&self) -> impl Iterator<Item = (Option<f64>, u64)> + '_ {
        let round =
            !matches!(self.layout, Layout::Bounds(_)) && self.unit == HistogramUnit::Seconds;
        let mut out = Vec::with_capacity(if round {
            DEFAULT_DURATION_LE.len() + 1
        } else {
            55
        });
        if round {
            self.round_buckets(&mut out);
        } else {
            self.layout_buckets(&mut out);
        }
        out.into_iter()
    }

    /// `export_buckets` at the layout's own bounds (user bounds, or the
    /// log-linear tops of [`DEFAULT_LE`]).
    fn layout_buckets(&self, out: &mut Vec<(Option<f64>, u64)>) {
        let all = matches!(self.layout, Layout::Bounds(_));
        let last = self.counts.len() - 1;
        let mut acc = 0u64;
        for (i, b) in self.buckets().enumerate() {
            acc = acc.wrapping_add(b.count);
            // A log-linear bucket ending just below a power of two, up to
            // the last that `f64` writes exactly, closes one exported
            // bucket.
            if all || (b.high & b.high.wrapping_add(1) == 0 && b.high < F64_EXACT) || i == last {
                let n = std::mem::take(&mut acc);
                let le = (i != last).then(|| self.unit.export(b.high));
                match out.last_mut() {
                    // User bounds that `f64` writes alike (above 2^53) are
                    // one exported bucket: an `le` written twice would be
                    // two series of one name.
                    Some((Some(before), m)) if le == Some(*before) => *m = m.wrapping_add(n),
                    _ => out.push((le, n)),
                }
            }
        }
    }

    /// `export_buckets` at [`DEFAULT_DURATION_LE`]: each bound counts the
    /// buckets that end at or below it.
    fn round_buckets(&self, out: &mut Vec<(Option<f64>, u64)>) {
        let mut bounds = DEFAULT_DURATION_LE.iter().map(|d| {
            // Up to 10 s: no overflow.
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
        });
        let mut next = bounds.next();
        let mut acc = 0u64;
        for b in self.buckets() {
            // This bucket does not end at or below the bounds it passes:
            // they close before it.
            while let Some(le) = next.filter(|&le| b.high > le) {
                out.push((Some(self.unit.export(le)), std::mem::take(&mut acc)));
                next = bounds.next();
            }
            acc = acc.wrapping_add(b.count);
        }
        // The last log-linear bucket ends at u64::MAX: every bound closed.
        debug_assert!(next.is_none());
        out.push((None, acc));
    }

    /// The sum in the exported [`unit`](Self::unit), as an `f64`.
    ///
    /// ```
    /// let h = shardcount::Histogram::for_durations();
    /// h.record_duration(std::time::Duration::from_millis(1500));
    /// assert_eq!(h.snapshot().export_sum(), 1.5);
    /// ```
    #[must_use]
    pub fn export_sum(&self) -> f64 {
        self.unit.export(self.sum)
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
    /// record with at least `q × count` records at or below it, the
    /// product taken as the decimal `q` means (`0.07 × 100` is 7, though
    /// in `f64` it is a rounding step above). This
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
    ///
    /// let small = shardcount::Histogram::new();
    /// (1..=100).for_each(|v| small.record(v)); // exact below 32
    /// let ranks = [0.07, 0.14, 0.28].map(|q| small.snapshot().quantile(q));
    /// assert_eq!(ranks, [Some(7), Some(14), Some(28)]);
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
        // A product a rounding step above a whole number (0.07 × 100 is
        // 7.000000000000001) is that number: p7 of 100 records is the 7th.
        let exact = q * total as f64;
        let near = exact.round();
        let rank = if (exact - near).abs() <= near * 4.0 * f64::EPSILON {
            near
        } else {
            exact.ceil()
        };
        let rank = (rank as u128).clamp(1, total);
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
    /// If the two have different bucket layouts or units (a duration
    /// histogram's snapshot and a plain one's: seconds against values as
    /// recorded).
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
            self.unit == other.unit,
            "shardcount: HistogramSnapshot::merge: the snapshots have different units \
             ({:?} and {:?})",
            self.unit,
            other.unit
        );
        assert!(
            self.layout == other.layout,
            "shardcount: HistogramSnapshot::merge: the snapshots have different buckets \
             ({} and {} buckets, or the same number with other bounds)",
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
