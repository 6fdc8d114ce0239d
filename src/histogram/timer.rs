//! Timing into a histogram: `record_since`, `time` and the
//! [`HistogramTimer`] guard. The clock is read off the record path: a
//! timer reads `Instant::now()` twice, `record_duration` does the rest.

use super::unlabelled::Histogram;
use std::fmt;
use std::time::{Duration, Instant};

impl Histogram {
    /// Records the time since `start`, in nanoseconds (as
    /// [`record_duration`](Self::record_duration)); a `start` in the
    /// future records 0 (`Instant::elapsed` saturates).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let h = shardcount::Histogram::new();
    /// let start = Instant::now() - Duration::from_millis(5);
    /// h.record_since(start);
    /// assert!(h.sum() >= 5_000_000);
    /// ```
    #[inline]
    pub fn record_since(&self, start: Instant) {
        self.record_duration(start.elapsed());
    }

    /// A guard that records the time from now until it is dropped (or
    /// [`stop`](HistogramTimer::stop)ped), in nanoseconds; one that is
    /// [`discard`](HistogramTimer::discard)ed records nothing.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// {
    ///     let _t = h.start_timer();
    ///     std::thread::sleep(std::time::Duration::from_millis(1));
    /// }
    /// assert_eq!(h.count(), 1);
    /// assert!(h.sum() >= 1_000_000);
    /// ```
    #[inline]
    #[must_use = "the timer records when dropped: bind it to a named variable, not `_`"]
    pub fn start_timer(&self) -> HistogramTimer<'_> {
        HistogramTimer {
            histogram: self,
            start: Instant::now(),
            armed: true,
        }
    }

    /// Runs `f` and records how long it took, in nanoseconds; returns what
    /// `f` returns. A panic in `f` is recorded too (the time until it
    /// unwound out of `time`): a failed call took that long as well.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// let n = h.time(|| (1..=10u64).sum::<u64>());
    /// assert_eq!((n, h.count()), (55, 1));
    /// ```
    #[inline]
    pub fn time<R>(&self, f: impl FnOnce() -> R) -> R {
        let _timer = self.start_timer();
        f()
    }
}

/// Records the time since [`Histogram::start_timer`] when dropped.
///
/// ```
/// let h = shardcount::Histogram::new();
/// let t = h.start_timer();
/// let took = t.stop();
/// assert_eq!((h.count(), h.sum()), (1, took.as_nanos() as u64));
/// ```
#[must_use = "the timer records when dropped: bind it to a named variable, not `_`"]
pub struct HistogramTimer<'a> {
    histogram: &'a Histogram,
    start: Instant,
    armed: bool,
}

impl HistogramTimer<'_> {
    /// How long it has run so far; records nothing.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// let t = h.start_timer();
    /// let _ = t.elapsed();
    /// t.discard();
    /// assert_eq!(h.count(), 0);
    /// ```
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Records now, and returns the time recorded.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// let took = h.start_timer().stop();
    /// assert_eq!(h.sum(), took.as_nanos() as u64);
    /// ```
    pub fn stop(mut self) -> Duration {
        self.armed = false;
        let took = self.start.elapsed();
        self.histogram.record_duration(took);
        took
    }

    /// Drops the timer without recording: for a call whose time should
    /// not count (a cancelled request).
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// h.start_timer().discard();
    /// assert_eq!(h.count(), 0);
    /// ```
    pub fn discard(mut self) {
        self.armed = false;
    }
}

impl Drop for HistogramTimer<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.armed {
            self.histogram.record_since(self.start);
        }
    }
}

impl fmt::Debug for HistogramTimer<'_> {
    /// The time so far.
    ///
    /// ```
    /// let h = shardcount::Histogram::new();
    /// let t = h.start_timer();
    /// assert!(format!("{t:?}").starts_with("HistogramTimer { elapsed: "));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistogramTimer")
            .field("elapsed", &self.elapsed())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_timer_records_once_whether_stopped_or_dropped() {
        let h = Histogram::new();
        let took = h.start_timer().stop();
        assert_eq!((h.count(), h.sum()), (1, took.as_nanos() as u64));
        drop(h.start_timer());
        assert_eq!(h.count(), 2);
        h.start_timer().discard();
        assert_eq!(h.count(), 2);
    }

    #[test]
    fn time_records_a_call_that_panics() {
        let h = Histogram::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.time(|| panic!("failed call"));
        }));
        assert!(r.is_err());
        assert_eq!(h.count(), 1);
    }

    #[test]
    fn record_since_a_future_instant_records_zero() {
        let h = Histogram::with_bounds(&[0]);
        h.record_since(Instant::now() + Duration::from_secs(60));
        let counts: Vec<u64> = h.snapshot().buckets().map(|b| b.count).collect();
        assert_eq!(counts, [1, 0]);
    }
}
