//! `Histogram` itself: its record path, reads, takes and merges over one
//! `CounterSet`, and the helpers `LabelledHistogram` shares (the protocol is
//! in the `histogram` module docs).

use super::layout::{Layout, LOG_LINEAR_BUCKETS};
use super::snapshot::{HistogramSnapshot, HistogramUnit};
use crate::set::CounterSet;
use std::fmt;
use std::time::Duration;

/// The sum's counter in the set.
pub(super) const SUM: usize = 0;

/// A distribution of `u64` values (latencies in nanoseconds, sizes in
/// bytes) that many threads record into at counter speed.
///
/// The buckets and the sum live in the rows of a [`CounterSet`]: an
/// uncontended histogram is one row, and a record is a bucket index (a few
/// instructions) and two `fetch_add`s on that row. Rows are added on
/// contention and owned by threads exactly as the set's are.
///
/// # Buckets
///
/// By default, log-linear: values below 32 each have a bucket, and every
/// power-of-two range above is split into 16 equal buckets, 976 in all,
/// so a bucket spans at most 1/16 of its values and a
/// [`quantile`](HistogramSnapshot::quantile) is within 1/32 of the exact one.
/// [`with_bounds`](Self::with_bounds) takes Prometheus-style `le` bounds
/// instead.
///
/// # Export
///
/// The integrations write a fixed `le` set, the same on every replica
/// whatever was recorded: the user's bounds; for the default buckets of
/// a duration histogram, the 16 round bounds of [`DEFAULT_DURATION_LE`]
/// (100 µs to 10 s, 1-2.5-5 per decade; a count there may leave out
/// records up to 1/16 below its bound, 3.6% at most); for other default buckets
/// the 54 bounds of [`DEFAULT_LE`] (`2^k - 1` up to `2^53 - 1`, each the
/// top of a bucket, so every cumulative count is exact, and each written
/// exactly as an `f64`); then `+Inf`. A histogram made by
/// [`for_durations`](Self::for_durations) or
/// [`with_duration_bounds`](Self::with_duration_bounds) records
/// nanoseconds and is exported in seconds ([`HistogramUnit::Seconds`]),
/// under a `_seconds` name.
///
/// [`DEFAULT_DURATION_LE`]: super::snapshot::DEFAULT_DURATION_LE
/// [`DEFAULT_LE`]: super::snapshot::DEFAULT_LE
///
/// # Reads
///
/// [`count`](Self::count), [`sum`](Self::sum) and the buckets of a
/// [`snapshot`](Self::snapshot) are exact at quiescence and include every
/// record that happened-before the read; under concurrent records they
/// are not one instant's. [`take`](Self::take) is lossless: every record
/// is in exactly one take or still in the histogram.
///
/// # Memory
///
/// A row is `buckets + 2` words (the buckets, the sum and a contention
/// mark) and 64 unwritten bytes, rounded up to 128-byte lines: 7,936
/// bytes with the default buckets, `ceil((bounds + 11) / 16) × 128` bytes
/// with user bounds. An
/// uncontended histogram is one row (made by [`with_bounds`](Self::with_bounds),
/// or on the first record for [`new`](Self::new)); a contended one adds
/// tables of 2, 4, ... rows up to the cap (the number of CPUs rounded up
/// to a power of two), all kept until it is dropped: at most about
/// `1 + 2 × cap` rows.
///
/// # Statics and timers
///
/// [`new`](Self::new) is `const`, so a `static` needs no `LazyLock`; a
/// [`start_timer`](Self::start_timer) guard records the time until it is
/// dropped, and [`time`](Self::time) times a closure:
///
/// ```
/// use shardcount::Histogram;
///
/// static LATENCY: Histogram = Histogram::new();
///
/// fn handle() -> u32 {
///     let _timer = LATENCY.start_timer(); // records when it goes
///     42
/// }
/// assert_eq!(handle(), 42);
/// assert_eq!(LATENCY.time(|| 7), 7);
/// assert_eq!(LATENCY.count(), 2);
/// ```
///
/// # Example
///
/// ```
/// use shardcount::Histogram;
///
/// let h = Histogram::new();
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             for v in 1..=1000 {
///                 h.record(v);
///             }
///         });
///     }
/// });
/// assert_eq!(h.count(), 2000);
/// assert_eq!(h.sum(), 1001 * 1000);
/// let p50 = h.snapshot().quantile(0.5).unwrap();
/// assert!(p50.abs_diff(500) <= 500 / 32);
/// ```
pub struct Histogram {
    // Its base row is made on the first record or split for `new` (a
    // `const fn` cannot allocate: `CounterSet::lazy`), at construction
    // for `with_bounds`.
    set: CounterSet,
    layout: Layout,
    unit: HistogramUnit,
}

impl Histogram {
    crate::primitive::const_fn! {
        /// An empty histogram with the default log-linear buckets. `const`,
        /// and allocates nothing: the first record makes its row.
        ///
        /// ```
        /// static H: shardcount::Histogram = shardcount::Histogram::new();
        /// assert_eq!(H.buckets(), 976);
        /// H.record(3);
        /// assert_eq!(H.count(), 1);
        /// ```
        #[must_use]
        pub const fn new() -> Self {
            Histogram::log_linear(HistogramUnit::AsRecorded)
        }
    }

    crate::primitive::const_fn! {
        /// Empty, with the default log-linear buckets, exported in `unit`.
        const fn log_linear(unit: HistogramUnit) -> Self {
            Histogram {
                set: CounterSet::lazy(LOG_LINEAR_BUCKETS + 1),
                layout: Layout::LogLinear,
                unit,
            }
        }
    }

    crate::primitive::const_fn! {
        /// An empty histogram of durations with the default log-linear
        /// buckets: record with [`record_duration`](Self::record_duration),
        /// [`record_since`](Self::record_since) or a
        /// [timer](Self::start_timer) (nanoseconds), and the integrations
        /// export it in seconds ([`HistogramUnit::Seconds`]). `const`, as
        /// [`new`](Self::new).
        ///
        /// ```
        /// use shardcount::{Histogram, HistogramUnit};
        /// static LATENCY: Histogram = Histogram::for_durations();
        /// LATENCY.record_duration(std::time::Duration::from_millis(3));
        /// assert_eq!((LATENCY.sum(), LATENCY.unit()), (3_000_000, HistogramUnit::Seconds));
        /// ```
        #[must_use]
        pub const fn for_durations() -> Self {
            Histogram::log_linear(HistogramUnit::Seconds)
        }
    }

    /// An empty histogram with Prometheus-style buckets: bucket `i` holds
    /// the values `v <= bounds[i]` above the bound before it, and one more
    /// bucket the values above the last bound (`le="+Inf"`). Bounds are in
    /// the unit recorded (nanoseconds for
    /// [`record_duration`](Self::record_duration)).
    ///
    /// # Panics
    ///
    /// If the bounds do not increase strictly, naming the first bad one,
    /// or the last is `u64::MAX` (the `+Inf` bucket holds the values above
    /// the last bound, and none is above `u64::MAX`).
    ///
    /// # Export
    ///
    /// The integrations write each bound as an `f64`: exactly up to
    /// `2^53`, and above it only where `f64` holds the bound (`10^18`,
    /// `2^60`); others (`2^54 + 1`, `u64::MAX - 1`) are written rounded to
    /// the nearest `f64`, while their counts stay those of the exact
    /// bound. Bounds written alike are one exported bucket, with the
    /// counts of both.
    ///
    /// ```
    /// let h = shardcount::Histogram::with_bounds(&[1 << 54, (1 << 54) + 1]);
    /// h.record((1 << 54) + 1);
    /// let b: Vec<_> = h.snapshot().export_buckets().collect();
    /// assert_eq!(b, [(Some(2f64.powi(54)), 1), (None, 0)]);
    ///
    /// let h = shardcount::Histogram::with_bounds(&[100, 1_000, 10_000]);
    /// h.record(100);
    /// h.record(50_000);
    /// let counts: Vec<u64> = h.snapshot().buckets().map(|b| b.count).collect();
    /// assert_eq!(counts, [1, 0, 0, 1]);
    /// ```
    ///
    /// ```should_panic
    /// // panics: "... bound 1 (10) is not above bound 0 (10)"
    /// let _ = shardcount::Histogram::with_bounds(&[10, 10]);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_bounds(bounds: &[u64]) -> Self {
        Histogram::with_layout(
            Layout::bounds(bounds, "Histogram::with_bounds"),
            HistogramUnit::AsRecorded,
        )
    }

    /// An empty histogram of durations with `le` bounds given as
    /// durations (kept in nanoseconds): as
    /// [`with_bounds`](Self::with_bounds), exported in seconds
    /// ([`HistogramUnit::Seconds`]).
    ///
    /// # Panics
    ///
    /// If the bounds do not increase strictly, or one is `u64::MAX`
    /// nanoseconds (about 584 years) or more, naming the first bad one.
    ///
    /// ```
    /// use std::time::Duration;
    /// let h = shardcount::Histogram::with_duration_bounds(&[
    ///     Duration::from_millis(5),
    ///     Duration::from_millis(50),
    /// ]);
    /// h.record_duration(Duration::from_millis(7));
    /// let counts: Vec<u64> = h.snapshot().buckets().map(|b| b.count).collect();
    /// assert_eq!(counts, [0, 1, 0]);
    /// assert_eq!(h.snapshot().buckets().next().unwrap().high, 5_000_000);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_duration_bounds(bounds: &[Duration]) -> Self {
        Histogram::with_layout(
            Layout::duration_bounds(bounds, "Histogram::with_duration_bounds"),
            HistogramUnit::Seconds,
        )
    }

    fn with_layout(layout: Layout, unit: HistogramUnit) -> Self {
        Histogram {
            set: CounterSet::new(layout.len() + 1),
            layout,
            unit,
        }
    }

    /// The unit the integrations export it in: [`HistogramUnit::Seconds`] for
    /// [`for_durations`](Self::for_durations) and
    /// [`with_duration_bounds`](Self::with_duration_bounds), else
    /// [`HistogramUnit::AsRecorded`].
    ///
    /// ```
    /// use shardcount::{Histogram, HistogramUnit};
    /// assert_eq!(Histogram::new().unit(), HistogramUnit::AsRecorded);
    /// assert_eq!(Histogram::for_durations().unit(), HistogramUnit::Seconds);
    /// ```
    #[must_use]
    pub fn unit(&self) -> HistogramUnit {
        self.unit
    }

    /// How many buckets it has.
    ///
    /// ```
    /// assert_eq!(shardcount::Histogram::with_bounds(&[1, 2]).buckets(), 3);
    /// ```
    #[must_use]
    pub fn buckets(&self) -> usize {
        self.layout.len()
    }

    /// Records `v`: one more in its bucket, and `v` added to the sum.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(42);
    /// assert_eq!((h.count(), h.sum()), (1, 42));
    /// ```
    // Always: a call per record costs about ten instructions, and LLVM
    // stops inlining once a crate records from a few places.
    #[inline(always)]
    pub fn record(&self, v: u64) {
        let i = self.layout.index(v);
        let set = &self.set;
        // SAFETY: `i < layout.len()`, so `i + 1` and `SUM` are below the
        // set's `layout.len() + 1` (`log_linear`, `with_layout`).
        unsafe { set.add_pair_unchecked(i + 1, 1, SUM, v) };
    }

    /// Records `v` `n` times (the sum wrapping as `n` records would): for
    /// records taken and not delivered, put back.
    #[cfg(feature = "metrics")]
    pub(crate) fn record_n(&self, v: u64, n: u64) {
        let i = self.layout.index(v);
        // SAFETY: as in `record`.
        unsafe {
            self.set
                .add_pair_unchecked(i + 1, n, SUM, v.wrapping_mul(n))
        };
    }

    /// Records a duration in nanoseconds; one above `u64::MAX` ns (about
    /// 584 years) is recorded as `u64::MAX`.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record_duration(std::time::Duration::from_micros(3));
    /// assert_eq!(h.sum(), 3_000);
    /// ```
    #[inline]
    pub fn record_duration(&self, d: Duration) {
        self.record(duration_ns(d));
    }

    /// Records `secs` seconds as nanoseconds (rounded to the nearest),
    /// as [`record_duration`](Self::record_duration); `+∞` and values above
    /// `u64::MAX` ns are recorded as `u64::MAX`.
    ///
    /// # Panics
    ///
    /// If `secs` is negative or NaN, naming it: a duration is neither.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record_secs(0.25);
    /// assert_eq!(h.sum(), 250_000_000);
    /// ```
    ///
    /// ```should_panic
    /// shardcount::Histogram::new().record_secs(-1.0);
    /// ```
    #[inline]
    #[track_caller]
    pub fn record_secs(&self, secs: f64) {
        if secs.is_nan() || secs < 0.0 {
            negative_secs(secs);
        }
        // `as` saturates: +inf and anything past u64::MAX ns become MAX.
        self.record((secs * 1e9).round() as u64);
    }

    /// How many values were recorded. Exact at quiescence; reads every
    /// bucket of every row (see [`HistogramSnapshot::count`] to read once).
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(1);
    /// h.record(1);
    /// assert_eq!(h.count(), 2);
    /// ```
    #[must_use]
    pub fn count(&self) -> u64 {
        self.snapshot().count()
    }

    /// The recorded values added, modulo 2<sup>64</sup>: a sum past
    /// `u64::MAX` wraps, as `u64::wrapping_add` does (about 584 years of
    /// nanoseconds). Exact at quiescence; one load per row.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(u64::MAX);
    /// h.record(2);
    /// assert_eq!(h.sum(), 1);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        self.set.total(SUM)
    }

    /// The bucket counts and the sum, read row by row. Exact at
    /// quiescence; under concurrent records not one instant's.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(10);
    /// let s = h.snapshot();
    /// assert_eq!((s.count(), s.sum(), s.quantile(1.0)), (1, 10, Some(10)));
    /// assert_eq!(h.count(), 1);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> HistogramSnapshot {
        self.to_snapshot(self.set.snapshot())
    }

    /// Reads the bucket counts and the sum into `out`, as
    /// [`snapshot`](Self::snapshot) does, reusing its buffer: after the
    /// first call on a snapshot of this histogram's layout it allocates
    /// nothing (for a scrape loop, or to read many histograms into one
    /// buffer).
    ///
    /// ```
    /// let h = shardcount::Histogram::with_bounds(&[10, 100]);
    /// let mut out = h.snapshot(); // the buffer, once
    /// h.record(7);
    /// h.record(70);
    /// h.snapshot_into(&mut out);
    /// assert_eq!((out.count(), out.sum()), (2, 77));
    /// ```
    pub fn snapshot_into(&self, out: &mut HistogramSnapshot) {
        out.refill(&self.layout, self.unit, |counts, sum| {
            self.set.fold_into(|part| match part {
                Some((SUM, v)) => *sum = sum.wrapping_add(v),
                Some((b, v)) => counts[b - 1] = counts[b - 1].wrapping_add(v),
                None => {
                    counts.fill(0);
                    *sum = 0;
                }
            });
        });
    }

    /// Moves the bucket counts and the sum out, leaving zeros, losing
    /// nothing while other threads record: every bucket count and every
    /// value in the sum lands in exactly one take, or stays. (A record
    /// racing a take may have its bucket in this take and its value in the
    /// next: totals over takes are exact.)
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(5);
    /// assert_eq!(h.take().count(), 1);
    /// assert_eq!(h.count(), 0);
    /// ```
    pub fn take(&self) -> HistogramSnapshot {
        self.to_snapshot(self.set.take_all())
    }

    /// Empties every bucket and the sum: [`take`](Self::take) with the
    /// snapshot dropped, as lossless (a concurrent record is dropped or
    /// kept, bucket and value each once).
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(5);
    /// h.reset();
    /// assert_eq!((h.count(), h.sum()), (0, 0));
    /// ```
    pub fn reset(&self) {
        self.set.reset();
    }

    /// The snapshot of `words` (the set's).
    fn to_snapshot(&self, words: Vec<u64>) -> HistogramSnapshot {
        snapshot_of(&self.layout, self.unit, Some(words))
    }

    /// How many rows it has besides the first: 0 while it was never
    /// contended (or since a [`merge`](Self::merge)). A diagnostic.
    ///
    /// ```
    /// assert_eq!(shardcount::Histogram::new().shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.set.shards()
    }

    /// Grows to at least `n` rows now, as
    /// [`Counter::split`](crate::Counter::split): before a burst the
    /// caller knows is coming. Returns the row count after.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// assert!(h.split(2) >= 2);
    /// h.record(5);
    /// assert_eq!(h.count(), 1);
    /// ```
    pub fn split(&self, n: usize) -> usize {
        self.set.split(n)
    }

    /// The rows.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn rows(&self) -> &CounterSet {
        &self.set
    }

    /// Folds the rows back into the first and frees them, as
    /// [`Counter::merge`](crate::Counter::merge): `true` when back to one
    /// row, `false` while the merge is pending.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(7);
    /// assert!(h.merge());
    /// assert_eq!((h.shards(), h.count()), (0, 1));
    /// ```
    pub fn merge(&self) -> bool {
        self.set.merge()
    }

    /// Merges every histogram of `histograms` as [`merge`](Self::merge)
    /// does, in one batch (see `Counter::merge_batch`). Returns how many
    /// are done.
    #[cfg(feature = "metrics")]
    pub(crate) fn merge_batch<'a>(histograms: impl IntoIterator<Item = &'a Histogram>) -> usize {
        let mut parts: Vec<_> = histograms
            .into_iter()
            .filter_map(|h| h.set.merge_part())
            .collect();
        crate::shard::merge_all(&mut parts)
    }
}

#[cfg(test)]
impl crate::shard::GrowOnce for Histogram {
    fn table_to_grow(&self) -> (&crate::shard::ShardTable, usize) {
        crate::shard::GrowOnce::table_to_grow(&self.set)
    }
}

/// The snapshot of a set's `words` (sum first, then the buckets), or an
/// empty one when there is no set yet.
pub(super) fn snapshot_of(
    layout: &Layout,
    unit: HistogramUnit,
    words: Option<Vec<u64>>,
) -> HistogramSnapshot {
    let mut words = words.unwrap_or_else(|| vec![0; layout.len() + 1]);
    let sum = words.remove(SUM);
    HistogramSnapshot::new(layout.clone(), unit, words, sum)
}

/// `d` in nanoseconds, `u64::MAX` past it.
#[inline]
pub(super) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cold]
#[inline(never)]
#[track_caller]
fn negative_secs(secs: f64) -> ! {
    panic!("shardcount: Histogram::record_secs: a duration is neither negative nor NaN, got {secs}")
}

impl Default for Histogram {
    /// [`Histogram::new`].
    ///
    /// ```
    /// let h = shardcount::Histogram::default();
    /// assert_eq!(h.count(), 0);
    /// ```
    fn default() -> Self {
        Histogram::new()
    }
}

impl fmt::Debug for Histogram {
    /// The count, the sum, the number of buckets and of rows.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.record(3);
    /// assert_eq!(
    ///     format!("{h:?}"),
    ///     "Histogram { count: 1, sum: 3, buckets: 976, shards: 0 }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.snapshot();
        f.debug_struct("Histogram")
            .field("count", &s.count())
            .field("sum", &s.sum())
            .field("buckets", &self.buckets())
            .field("shards", &self.shards())
            .finish()
    }
}

/// Small enough for miri: reaches the pair add's unsafe word addressing on
/// the base row, on owned rows and on probed ones.
#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;
    use crate::shard::GrowOnce;

    /// `new` makes no row; reads before the first record see an empty
    /// histogram of the default layout, and the first record makes it.
    #[test]
    fn a_const_histogram_reads_empty_until_its_first_record() {
        static H: Histogram = Histogram::new();
        assert!(!H.set.base_is_made());
        let s = H.take();
        assert_eq!((s.count(), s.sum(), s.buckets().count()), (0, 0, 976));
        assert_eq!((H.sum(), H.shards()), (0, 0));
        H.record(1000);
        assert!(H.set.base_is_made());
        assert_eq!((H.count(), H.sum()), (1, 1000));
    }

    #[test]
    fn records_land_once_on_the_base_and_on_grown_rows() {
        let h = Histogram::with_bounds(&[1, 100, 10_000]);
        h.record(50);
        h.grow_once();
        h.grow_once();
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let h = &h;
                s.spawn(move || (0..20).for_each(|i| h.record(t * 1000 + i)));
            }
        });
        h.record(u64::MAX);
        let got = h.take();
        let counts: Vec<u64> = got.buckets().map(|b| b.count).collect();
        // 50; thread 0: 0..20 (0, 1 | 2..=19); thread 1: 1000..1020;
        // thread 2: 2000..2020; then u64::MAX.
        assert_eq!(counts, [2, 19, 40, 1]);
        let want = 50 + (0..20u64).sum::<u64>() * 3 + 20 * 3000;
        assert_eq!(got.sum(), want.wrapping_add(u64::MAX));
        assert_eq!(h.count(), 0);
    }
}
