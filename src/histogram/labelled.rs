//! `LabelledHistogram<L>`: one histogram per value of a [`Label`] type,
//! all with the same buckets, constructible in a `static`.
//!
//! Each label value has its own [`CounterSet`] (a histogram's rows), so
//! threads recording different labels never share a row, and each grows
//! only if its own label is contended. The sets are made together on the
//! first record (a `static` cannot allocate); a record is then a
//! histogram's record plus the label's index: no hashing, no lock.

use super::layout::Layout;
use super::lazy_sets::LazySets;
use super::snapshot::{HistogramSnapshot, HistogramUnit};
use super::unlabelled::{duration_ns, snapshot_of, SUM};
use crate::labels::Label;
use crate::set::CounterSet;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// A family of histograms indexed by a [`Label`] type (an enum, or a
/// struct or tuple of them): one per label value, all with the same
/// buckets and [`unit`](Self::unit), each recorded into at a plain
/// [`Histogram`](crate::Histogram)'s speed.
///
/// The integrations export it as one histogram family with the label
/// pairs of [`Label::NAMES`] and [`Label::text`] on every member
/// (prometheus-client's `Shared`, tikv `prometheus`'s
/// `CollectedHistogram`).
///
/// # Memory
///
/// One histogram's rows per label value (`L::COUNT` rows of
/// [`Histogram`](crate::Histogram)'s size, 7,936 bytes each with the
/// default buckets), made on the first record; each grows on its own
/// when its label is contended.
///
/// # Example
///
/// ```
/// use shardcount::{Label, LabelledHistogram};
/// use std::time::Duration;
///
/// #[derive(Clone, Copy, Debug, PartialEq, Label)]
/// enum Route { Home, Checkout }
///
/// static LATENCY: LabelledHistogram<Route> = LabelledHistogram::for_durations();
///
/// LATENCY.record_duration(Route::Home, Duration::from_micros(300));
/// LATENCY.time(Route::Checkout, || ());
/// assert_eq!(LATENCY.snapshot(Route::Home).sum(), 300_000);
/// assert_eq!(LATENCY.snapshot(Route::Checkout).count(), 1);
/// ```
pub struct LabelledHistogram<L> {
    // `L::COUNT` sets of `layout.len() + 1` counters, made on first use.
    sets: LazySets,
    layout: Layout,
    unit: HistogramUnit,
    // `fn() -> L`: holds no `L`, so Send and Sync whatever `L` is.
    _label: PhantomData<fn() -> L>,
}

impl<L: Label> LabelledHistogram<L> {
    const fn of(layout: Layout, unit: HistogramUnit) -> Self {
        const { crate::labels::check_names(L::NAMES, true) };
        LabelledHistogram {
            sets: LazySets::new(L::COUNT),
            layout,
            unit,
            _label: PhantomData,
        }
    }

    /// A family with the default log-linear buckets, in the unit
    /// recorded. Allocates nothing.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// static SIZES: shardcount::LabelledHistogram<Op> = shardcount::LabelledHistogram::new();
    /// SIZES.record(Op::Write, 4096);
    /// assert_eq!(SIZES.snapshot(Op::Write).sum(), 4096);
    /// assert_eq!(SIZES.buckets(), 976);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self::of(Layout::LogLinear, HistogramUnit::AsRecorded)
    }

    /// A family of durations with the default log-linear buckets:
    /// recorded in nanoseconds, exported in seconds
    /// ([`HistogramUnit::Seconds`]). Allocates nothing.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// static LATENCY: shardcount::LabelledHistogram<Op> =
    ///     shardcount::LabelledHistogram::for_durations();
    /// assert_eq!(LATENCY.unit(), shardcount::HistogramUnit::Seconds);
    /// ```
    #[must_use]
    pub const fn for_durations() -> Self {
        Self::of(Layout::LogLinear, HistogramUnit::Seconds)
    }

    /// A family with `le` bounds, as
    /// [`Histogram::with_bounds`](crate::Histogram::with_bounds).
    ///
    /// # Panics
    ///
    /// As [`Histogram::with_bounds`](crate::Histogram::with_bounds): if
    /// the bounds do not increase strictly, naming the first bad one, or
    /// the last is `u64::MAX`.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::with_bounds(&[10, 100]);
    /// h.record(Op::Read, 50);
    /// let counts: Vec<u64> = h.snapshot(Op::Read).buckets().map(|b| b.count).collect();
    /// assert_eq!(counts, [0, 1, 0]);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_bounds(bounds: &[u64]) -> Self {
        Self::of(
            Layout::bounds(bounds, "LabelledHistogram::with_bounds"),
            HistogramUnit::AsRecorded,
        )
    }

    /// A family of durations with `le` bounds given as durations, as
    /// [`Histogram::with_duration_bounds`](crate::Histogram::with_duration_bounds).
    ///
    /// # Panics
    ///
    /// As [`Histogram::with_duration_bounds`](crate::Histogram::with_duration_bounds).
    ///
    /// ```
    /// use std::time::Duration;
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::with_duration_bounds(&[Duration::from_millis(1)]);
    /// h.record_duration(Op::Read, Duration::from_micros(10));
    /// assert_eq!(h.snapshot(Op::Read).export_buckets().next(), Some((Some(0.001), 1)));
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_duration_bounds(bounds: &[Duration]) -> Self {
        Self::of(
            Layout::duration_bounds(bounds, "LabelledHistogram::with_duration_bounds"),
            HistogramUnit::Seconds,
        )
    }

    /// The sets, made on first use.
    #[inline(always)]
    fn sets(&self) -> &[CounterSet] {
        match self.sets.get() {
            Some(sets) => sets,
            None => self.make(),
        }
    }

    #[cold]
    #[inline(never)]
    fn make(&self) -> &[CounterSet] {
        self.sets
            .get_or_make(|| CounterSet::new(self.layout.len() + 1))
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn out_of_range(i: usize) -> ! {
        panic!(
            "shardcount: LabelledHistogram: the label's index() returned {i}, but its COUNT is {}",
            L::COUNT
        )
    }

    /// Records `v` under `label`: one more in its bucket, `v` added to
    /// the sum.
    ///
    /// # Panics
    ///
    /// If `label.index() >= L::COUNT` (a hand-written [`Label`] that breaks
    /// its contract; a derived one never does), naming both.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Read, 42);
    /// assert_eq!((h.snapshot(Op::Read).count(), h.snapshot(Op::Write).count()), (1, 0));
    /// ```
    // Always: as `Histogram::record`.
    #[inline(always)]
    #[track_caller]
    pub fn record(&self, label: L, v: u64) {
        self.record_index(label.index(), v);
    }

    /// [`record`](Self::record) by the label's index.
    #[inline(always)]
    #[track_caller]
    fn record_index(&self, i: usize, v: u64) {
        let sets = self.sets();
        if i < L::COUNT {
            let b = self.layout.index(v);
            // SAFETY: `make` made `L::COUNT` sets, and `i` is below that;
            // each has `layout.len() + 1` counters, so `b + 1` (with
            // `b < layout.len()`) and `SUM` are in range.
            unsafe { sets.get_unchecked(i).add_pair_unchecked(b + 1, 1, SUM, v) }
        } else {
            Self::out_of_range(i)
        }
    }

    /// Records a duration under `label`, in nanoseconds (as
    /// [`Histogram::record_duration`](crate::Histogram::record_duration)).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::for_durations();
    /// h.record_duration(Op::Write, std::time::Duration::from_micros(2));
    /// assert_eq!(h.snapshot(Op::Write).sum(), 2_000);
    /// ```
    #[inline]
    #[track_caller]
    pub fn record_duration(&self, label: L, d: Duration) {
        self.record(label, duration_ns(d));
    }

    /// Records the time since `start` under `label`, in nanoseconds.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::for_durations();
    /// h.record_since(Op::Read, std::time::Instant::now());
    /// assert_eq!(h.snapshot(Op::Read).count(), 1);
    /// ```
    #[inline]
    #[track_caller]
    pub fn record_since(&self, label: L, start: Instant) {
        self.record_duration(label, start.elapsed());
    }

    /// Runs `f` and records how long it took under `label`; returns what
    /// `f` returns. A panic in `f` is recorded too, as
    /// [`Histogram::time`](crate::Histogram::time) records it.
    ///
    /// # Panics
    ///
    /// As [`record`](Self::record), before `f` runs.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::for_durations();
    /// assert_eq!(h.time(Op::Write, || 7), 7);
    /// assert_eq!(h.snapshot(Op::Write).count(), 1);
    /// ```
    #[track_caller]
    pub fn time<R>(&self, label: L, f: impl FnOnce() -> R) -> R {
        // The label is checked before `f` runs: the record runs in a drop,
        // where a panic while `f` unwinds would abort the process.
        let i = label.index();
        if i >= L::COUNT {
            Self::out_of_range(i);
        }
        /// Records on drop, so on unwinding too.
        struct Timing<'a, L: Label> {
            h: &'a LabelledHistogram<L>,
            i: usize,
            start: Instant,
        }
        impl<L: Label> Drop for Timing<'_, L> {
            fn drop(&mut self) {
                self.h
                    .record_index(self.i, duration_ns(self.start.elapsed()));
            }
        }
        let _timing = Timing {
            h: self,
            i,
            start: Instant::now(),
        };
        f()
    }

    /// How many buckets each member has.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read }
    /// assert_eq!(shardcount::LabelledHistogram::<Op>::with_bounds(&[1]).buckets(), 2);
    /// ```
    #[must_use]
    pub fn buckets(&self) -> usize {
        self.layout.len()
    }

    /// The unit the integrations export it in.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read }
    /// let h = shardcount::LabelledHistogram::<Op>::new();
    /// assert_eq!(h.unit(), shardcount::HistogramUnit::AsRecorded);
    /// ```
    #[must_use]
    pub fn unit(&self) -> HistogramUnit {
        self.unit
    }

    /// Member `i`'s snapshot (`i < L::COUNT`), or an empty one.
    pub(crate) fn snapshot_index(&self, i: usize) -> HistogramSnapshot {
        let words = self
            .sets
            .get()
            .and_then(|s| s.get(i))
            .map(CounterSet::snapshot);
        snapshot_of(&self.layout, self.unit, words)
    }

    /// `label`'s buckets and sum, as
    /// [`Histogram::snapshot`](crate::Histogram::snapshot); empty (never a
    /// panic) for an index past `L::COUNT`.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Read, 9);
    /// assert_eq!(h.snapshot(Op::Read).quantile(0.5), Some(9));
    /// ```
    #[must_use]
    pub fn snapshot(&self, label: L) -> HistogramSnapshot {
        self.snapshot_index(label.index())
    }

    /// Moves `label`'s buckets and sum out, losslessly, as
    /// [`Histogram::take`](crate::Histogram::take).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Read, 9);
    /// assert_eq!(h.take(Op::Read).count(), 1);
    /// assert!(h.snapshot(Op::Read).is_empty());
    /// ```
    pub fn take(&self, label: L) -> HistogramSnapshot {
        self.take_index(label.index())
    }

    /// [`take`](Self::take) by the label's index.
    fn take_index(&self, i: usize) -> HistogramSnapshot {
        let words = self
            .sets
            .get()
            .and_then(|s| s.get(i))
            .map(CounterSet::take_all);
        snapshot_of(&self.layout, self.unit, words)
    }

    /// Takes every label's buckets and sum, in index order, each as
    /// [`take`](Self::take).
    ///
    /// ```
    /// #[derive(Clone, Copy, Debug, PartialEq, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Write, 1);
    /// let counts: Vec<_> = h.take_all().into_iter().map(|(l, s)| (l, s.count())).collect();
    /// assert_eq!(counts, [(Op::Read, 0), (Op::Write, 1)]);
    /// assert!(h.snapshot(Op::Write).is_empty());
    /// ```
    #[must_use]
    pub fn take_all(&self) -> Vec<(L, HistogramSnapshot)> {
        (0..L::COUNT)
            .filter_map(|i| Some((L::from_index(i)?, self.take_index(i))))
            .collect()
    }

    /// Empties every label's buckets and sum: [`take_all`](Self::take_all)
    /// with the snapshots dropped.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Read, 4);
    /// h.reset();
    /// assert!(h.snapshot(Op::Read).is_empty());
    /// ```
    pub fn reset(&self) {
        for set in self.sets.get().into_iter().flatten() {
            set.reset();
        }
    }

    /// Every label with its snapshot, in index order.
    ///
    /// ```
    /// #[derive(Clone, Copy, Debug, PartialEq, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Write, 1);
    /// let counts: Vec<_> = h.snapshot_all().into_iter().map(|(l, s)| (l, s.count())).collect();
    /// assert_eq!(counts, [(Op::Read, 0), (Op::Write, 1)]);
    /// ```
    #[must_use]
    pub fn snapshot_all(&self) -> Vec<(L, HistogramSnapshot)> {
        (0..L::COUNT)
            .filter_map(|i| Some((L::from_index(i)?, self.snapshot_index(i))))
            .collect()
    }

    /// Grows every label's rows to at least `n` now, as
    /// [`Counter::split`](crate::Counter::split). Returns the fewest rows
    /// a label has after.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::<Op>::new();
    /// assert!(h.split(2) >= 2);
    /// ```
    pub fn split(&self, n: usize) -> usize {
        self.sets().iter().map(|s| s.split(n)).min().unwrap_or(0)
    }

    /// Every label's rows, once the first record made them (none before).
    #[cfg(not(shardcount_loom))]
    pub(crate) fn rows(&self) -> &[CounterSet] {
        self.sets.get().unwrap_or(&[])
    }

    /// Folds every label's rows back into its first and frees them, as
    /// [`Counter::merge`](crate::Counter::merge): `true` when every label
    /// is back to one row, `false` while a merge is pending.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Read, 3);
    /// assert!(h.merge());
    /// assert_eq!(h.snapshot(Op::Read).count(), 1);
    /// ```
    pub fn merge(&self) -> bool {
        self.sets
            .get()
            // Every set, even after one is pending: no short circuit.
            .is_none_or(|sets| {
                sets.iter()
                    .map(CounterSet::merge)
                    .filter(|done| !done)
                    .count()
                    == 0
            })
    }

    /// Writes the texts of member `i`'s labels, comma-separated.
    fn write_texts(i: usize, out: &mut impl fmt::Write) -> fmt::Result {
        for dim in 0..L::NAMES.len() {
            if dim > 0 {
                out.write_char(',')?;
            }
            out.write_str(L::text(i, dim).unwrap_or(""))?;
        }
        Ok(())
    }
}

impl<L: Label> Default for LabelledHistogram<L> {
    /// [`new`](LabelledHistogram::new).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read }
    /// let h: shardcount::LabelledHistogram<Op> = Default::default();
    /// assert!(h.snapshot(Op::Read).is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Label> fmt::Debug for LabelledHistogram<L> {
    /// The label names and up to 16 members' counts, each under its label
    /// texts (comma-separated).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Op { Read, Write }
    /// let h = shardcount::LabelledHistogram::new();
    /// h.record(Op::Write, 3);
    /// assert_eq!(
    ///     format!("{h:?}"),
    ///     "LabelledHistogram { labels: [\"op\"], counts: {\"read\": 0, \"write\": 1} }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Counts<'a, L>(&'a LabelledHistogram<L>);
        impl<L: Label> fmt::Debug for Counts<'_, L> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut m = f.debug_map();
                let mut text = String::new();
                for i in 0..L::COUNT.min(16) {
                    text.clear();
                    LabelledHistogram::<L>::write_texts(i, &mut text)?;
                    m.entry(&text, &self.0.snapshot_index(i).count());
                }
                if L::COUNT > 16 {
                    m.finish_non_exhaustive()
                } else {
                    m.finish()
                }
            }
        }
        f.debug_struct("LabelledHistogram")
            .field("labels", &L::NAMES)
            .field("counts", &Counts(self))
            .finish()
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Two {
        A,
        B,
    }

    impl Label for Two {
        const COUNT: usize = 2;
        const NAMES: &'static [&'static str] = &["two"];
        fn index(&self) -> usize {
            *self as usize
        }
        fn from_index(i: usize) -> Option<Self> {
            [Two::A, Two::B].get(i).copied()
        }
        fn text(i: usize, dim: usize) -> Option<&'static str> {
            (dim == 0).then(|| ["a", "b"].get(i).copied()).flatten()
        }
    }

    /// Records under one label land in its histogram alone, from several
    /// threads, and takes move them out.
    #[test]
    fn each_label_counts_its_own_records() {
        static H: LabelledHistogram<Two> = LabelledHistogram::new();
        assert!(H.sets.get().is_none(), "a const family allocated");
        std::thread::scope(|s| {
            for t in 0..2u64 {
                s.spawn(move || {
                    for v in 0..100 {
                        H.record(if v % 4 == 0 { Two::A } else { Two::B }, v + t);
                    }
                });
            }
        });
        let (a, b) = (H.take(Two::A), H.snapshot(Two::B));
        assert_eq!((a.count(), b.count()), (50, 150));
        let want_a: u64 = (0..100).filter(|v| v % 4 == 0).map(|v| 2 * v + 1).sum();
        assert_eq!(a.sum(), want_a);
        assert_eq!(H.snapshot(Two::A).count(), 0);
    }

    #[test]
    fn time_records_a_call_that_panics_under_its_label() {
        let h = LabelledHistogram::<Two>::for_durations();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.time(Two::B, || panic!("failed call"));
        }));
        assert!(r.is_err());
        assert_eq!(
            (h.snapshot(Two::A).count(), h.snapshot(Two::B).count()),
            (0, 1)
        );
    }

    /// A hand-written label whose index breaks its contract.
    #[derive(Clone, Copy)]
    struct Past;

    impl Label for Past {
        const COUNT: usize = 1;
        const NAMES: &'static [&'static str] = &["past"];
        fn index(&self) -> usize {
            7
        }
        fn from_index(_: usize) -> Option<Self> {
            None
        }
        fn text(_: usize, _: usize) -> Option<&'static str> {
            None
        }
    }

    /// `time` checks the label before the call runs: checked in the drop,
    /// while a failing call unwinds, its panic aborted the process (this
    /// test binary with it).
    #[test]
    fn time_checks_the_label_before_the_call_runs() {
        let h = LabelledHistogram::<Past>::for_durations();
        let ran = std::cell::Cell::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.time(Past, || {
                ran.set(true);
                panic!("the call fails");
            })
        }));
        let panic = r.expect_err("an index past COUNT panics");
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(message.contains("index() returned 7"), "{message}");
        assert!(!ran.get(), "the call ran with a label it cannot record");
    }
}
