//! `MaxCounter` and `MinCounter`: a running maximum (minimum) whose records
//! below the current value write nothing shared.
//!
//! # Protocol
//!
//! `Extremum` keeps a maximum; `MinCounter` is one over the complemented
//! values (`!v`), so both share this code, and 0 is the identity.
//!
//! * `base: AtomicU64` holds the maximum of everything recorded while no
//!   table exists, and stays part of every read for ever.
//! * `table: ShardTable` (one-line rows, the first word of each) holds per
//!   shard maxima once records were seen to contend (module docs of
//!   `shard`: publication, growth, take epochs).
//! * `record(v)` loads the word it would write (`Relaxed`) and returns when
//!   `v` is not above it; on a shard it also compares with the base (the
//!   maximum from before growth, a line nobody writes any more). Only a
//!   value above both is written, by a compare-exchange loop. A lost
//!   exchange (another writer raised the word between the load and the
//!   exchange) is the contention signal: its failure ordering is `Acquire`
//!   so that a take's `Release` swap it read makes the take's start show in
//!   the epoch, and the take is not taken for contention.
//! * The value only ever rises between takes, so every word's maximum is a
//!   plain fold; `take` swaps each word with 0 through the shard table's
//!   take guard (`Release`, as a counter's take), so each record is
//!   reflected in exactly one take's result or stays.
//! * Reads load each word `Relaxed`: coherence alone makes a read include
//!   every record that happened-before it.

use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::shard::{Head, Lost, ShardTable};
use crate::thread;
use std::fmt;

/// The shared maximum.
struct Extremum {
    base: AtomicU64,
    table: ShardTable,
}

impl Extremum {
    crate::primitive::const_fn! {
        const fn new() -> Self {
            Extremum {
                base: AtomicU64::new(0),
                table: ShardTable::new(None),
            }
        }
    }

    #[inline]
    fn record(&self, v: u64) {
        let head = self.table.load();
        let (at, on_base) = match self.table.table(head) {
            None => (&self.base, true),
            Some(t) => (t.shard(thread::probe()), false),
        };
        // Relaxed: only the value is needed; a raise orders itself by its
        // exchange.
        if v <= at.load(Ordering::Relaxed) {
            return;
        }
        // Relaxed: the base is no longer written once a table exists.
        if !on_base && v <= self.base.load(Ordering::Relaxed) {
            return;
        }
        self.raise(head, at, on_base, v);
    }

    #[cold]
    #[inline(never)]
    fn raise(&self, head: Head, at: &AtomicU64, on_base: bool, v: u64) {
        let before = self.table.epoch_before(head);
        // Relaxed: a first guess; the loop below re-checks.
        let mut cur = at.load(Ordering::Relaxed);
        let mut lost = false;
        while v > cur {
            // Relaxed on success: a lone RMW, nothing published through the
            // value. Acquire on failure: a take's Release swap read here
            // shows its start in the epoch (see the module docs).
            match at.compare_exchange_weak(cur, v, Ordering::Relaxed, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => {
                    // A weak exchange may fail spuriously on an unchanged word.
                    lost |= now != cur;
                    cur = now;
                }
            }
        }
        if lost {
            self.table.exchange_lost(Lost {
                head,
                before,
                on_base,
                row_lines: 1,
            });
        }
    }

    fn get(&self) -> u64 {
        // Relaxed: see the module docs.
        let mut max = self.base.load(Ordering::Relaxed);
        self.table
            .for_each_shard(|s| max = max.max(s.load(Ordering::Relaxed)));
        max
    }

    fn take(&self) -> u64 {
        // The take ends when `take` drops, after the last swap.
        let take = self.table.take();
        let mut max = take.swap(&self.base);
        take.swap_shards(|v| max = max.max(v));
        max
    }

    fn shards(&self) -> usize {
        self.table.shards()
    }
}

/// The largest `u64` recorded, from any number of threads.
///
/// A [`record`](Self::record) that does not raise the maximum is a load and
/// a compare: no shared write, so threads recording values below the current
/// maximum do not fight over a cache line. A raise is a compare-exchange;
/// when raises are seen to collide the maximum is spread over per-thread
/// shards (as [`Counter`](crate::Counter) does), and a thread then compares
/// with its own shard and with the maximum from before the split.
///
/// [`get`](Self::get) is exact at quiescence (0 if nothing was recorded).
/// [`take`](Self::take) loses nothing: every recorded value is reflected in
/// exactly one take's result (which is at least that value) or stays.
///
/// ```
/// use shardcount::MaxCounter;
///
/// static LATENCY_MAX: MaxCounter = MaxCounter::new();
/// std::thread::scope(|s| {
///     for t in 0..2u64 {
///         s.spawn(move || (0..1000).for_each(|i| LATENCY_MAX.record(i * 2 + t)));
///     }
/// });
/// assert_eq!(LATENCY_MAX.get(), 1999);
/// assert_eq!(LATENCY_MAX.take(), 1999);
/// assert_eq!(LATENCY_MAX.get(), 0);
/// ```
pub struct MaxCounter(Extremum);

impl MaxCounter {
    crate::primitive::const_fn! {
        /// Nothing recorded yet: [`get`](Self::get) is 0. `const`, 16
        /// bytes, allocates nothing until contention.
        ///
        /// ```
        /// static M: shardcount::MaxCounter = shardcount::MaxCounter::new();
        /// assert_eq!(M.get(), 0);
        /// ```
        #[must_use]
        pub const fn new() -> Self {
            MaxCounter(Extremum::new())
        }
    }

    /// Records `v`: the maximum becomes `max(maximum, v)`.
    ///
    /// ```
    /// let m = shardcount::MaxCounter::new();
    /// m.record(3);
    /// m.record(1);
    /// assert_eq!(m.get(), 3);
    /// ```
    #[inline]
    pub fn record(&self, v: u64) {
        self.0.record(v);
    }

    /// The largest value recorded since creation or the last take (0 if
    /// none): exact at quiescence, and includes every record that
    /// happened-before the call.
    ///
    /// ```
    /// let m = shardcount::MaxCounter::new();
    /// m.record(u64::MAX);
    /// assert_eq!(m.get(), u64::MAX);
    /// ```
    #[must_use]
    pub fn get(&self) -> u64 {
        self.0.get()
    }

    /// Returns the maximum and starts over from 0, losing nothing that
    /// other threads record meanwhile.
    ///
    /// ```
    /// let m = shardcount::MaxCounter::new();
    /// m.record(5);
    /// assert_eq!(m.take(), 5);
    /// assert_eq!(m.take(), 0);
    /// ```
    pub fn take(&self) -> u64 {
        self.0.take()
    }

    /// Starts over from 0 (a [`take`](Self::take) whose result is dropped).
    ///
    /// ```
    /// let m = shardcount::MaxCounter::new();
    /// m.record(5);
    /// m.reset();
    /// assert_eq!(m.get(), 0);
    /// ```
    pub fn reset(&self) {
        self.0.take();
    }

    /// How many shards it has spread over: 0 until raises collided.
    ///
    /// ```
    /// assert_eq!(shardcount::MaxCounter::new().shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.0.shards()
    }
}

#[cfg(test)]
impl crate::shard::GrowOnce for MaxCounter {
    fn table_to_grow(&self) -> (&ShardTable, usize) {
        (&self.0.table, 1)
    }
}

/// The smallest `u64` recorded, from any number of threads: a
/// [`MaxCounter`] of the complemented values, with the same costs and
/// guarantees. [`get`](Self::get) is `u64::MAX` while nothing is recorded.
///
/// ```
/// use shardcount::MinCounter;
///
/// let fastest = MinCounter::new();
/// std::thread::scope(|s| {
///     for t in 1..=2u64 {
///         let fastest = &fastest;
///         s.spawn(move || (0..100).for_each(|i| fastest.record(1000 - i * t)));
///     }
/// });
/// assert_eq!(fastest.get(), 802);
/// assert_eq!(fastest.take(), 802);
/// assert_eq!(fastest.get(), u64::MAX);
/// ```
pub struct MinCounter(Extremum);

impl MinCounter {
    crate::primitive::const_fn! {
        /// Nothing recorded yet: [`get`](Self::get) is `u64::MAX`. `const`.
        ///
        /// ```
        /// static M: shardcount::MinCounter = shardcount::MinCounter::new();
        /// assert_eq!(M.get(), u64::MAX);
        /// ```
        #[must_use]
        pub const fn new() -> Self {
            MinCounter(Extremum::new())
        }
    }

    /// Records `v`: the minimum becomes `min(minimum, v)`.
    ///
    /// ```
    /// let m = shardcount::MinCounter::new();
    /// m.record(3);
    /// m.record(7);
    /// assert_eq!(m.get(), 3);
    /// ```
    #[inline]
    pub fn record(&self, v: u64) {
        self.0.record(!v);
    }

    /// The smallest value recorded since creation or the last take
    /// (`u64::MAX` if none); exact at quiescence.
    ///
    /// ```
    /// let m = shardcount::MinCounter::new();
    /// m.record(0);
    /// assert_eq!(m.get(), 0);
    /// ```
    #[must_use]
    pub fn get(&self) -> u64 {
        !self.0.get()
    }

    /// Returns the minimum and starts over from `u64::MAX`, losing nothing
    /// recorded meanwhile.
    ///
    /// ```
    /// let m = shardcount::MinCounter::new();
    /// m.record(5);
    /// assert_eq!(m.take(), 5);
    /// assert_eq!(m.take(), u64::MAX);
    /// ```
    pub fn take(&self) -> u64 {
        !self.0.take()
    }

    /// Starts over from `u64::MAX`.
    ///
    /// ```
    /// let m = shardcount::MinCounter::new();
    /// m.record(5);
    /// m.reset();
    /// assert_eq!(m.get(), u64::MAX);
    /// ```
    pub fn reset(&self) {
        self.0.take();
    }

    /// How many shards it has spread over: 0 until raises collided.
    ///
    /// ```
    /// assert_eq!(shardcount::MinCounter::new().shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.0.shards()
    }
}

macro_rules! extremum_common {
    ($ty:ident) => {
        impl Default for $ty {
            #[doc = concat!("Same as [`", stringify!($ty), "::new`].\n\n```\nlet m = shardcount::",
                stringify!($ty), "::default();\nassert_eq!(m.get(), shardcount::", stringify!($ty),
                "::new().get());\n```")]
            fn default() -> Self {
                $ty::new()
            }
        }

        impl fmt::Debug for $ty {
            #[doc = concat!("Shows the current value and the shard count.\n\n```\nlet m = shardcount::",
                stringify!($ty), "::new();\nm.record(4);\nassert_eq!(format!(\"{m:?}\"), \"",
                stringify!($ty), " { value: 4, shards: 0 }\");\n```")]
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("value", &self.get())
                    .field("shards", &self.shards())
                    .finish()
            }
        }
    };
}
extremum_common!(MaxCounter);
extremum_common!(MinCounter);
