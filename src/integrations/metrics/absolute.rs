//! `CounterFn` for [`Counter`] and [`RoughCounter`]: `increment` is `add`,
//! and `absolute` raises the count under one of 64 process-wide locks,
//! picked by the counter's address (`raise_to`), so increments never wait.

use crate::contract::{Count, Kind};
use crate::counter::Counter;
use crate::primitive::sync::{lock, Mutex};
use crate::rough::RoughCounter;
use ::metrics::CounterFn;

/// The locks that serialise `absolute` calls; which one a counter uses
/// depends on its address only.
static RAISE: [Mutex<()>; 64] = [const { Mutex::new(()) }; 64];

/// Raises the counter at `addr` (read by `sum`, added to by `add`) to at
/// least `value`: under its stripe lock, adds `value - sum()` when that is
/// positive.
///
/// Why it never stacks (add-only use): all raises of one counter run under
/// one lock, so each raise's `sum` happens-after every earlier raise's
/// `add` and includes it (both counters' `sum` includes every update that
/// happened-before it). Let the last raise that added be K, reading `s_K`
/// and adding `v_K - s_K`. `s_K` includes every earlier raise's addition
/// (and some increments, all non-negative), so the raises together added at
/// most `v_K`: the total is at most `v_K` plus what increments added. And
/// it is at least `value` after any raise: `s` never exceeds the total at
/// the time of the `add` (each word only grows), so the `add` lifts it to
/// `value` or above.
fn raise_to(addr: usize, value: u64, sum: impl FnOnce() -> u64, add: impl FnOnce(u64)) {
    // Counters are at least 16 bytes apart; mix in higher bits too.
    let stripe = ((addr >> 4) ^ (addr >> 10)) % RAISE.len();
    let _held = lock(&RAISE[stripe]);
    let s = sum();
    if value > s {
        add(value - s);
    }
}

/// `CounterFn` for counter types, written once over the contract:
/// `increment(v)` is the type's `add(v)`, and `absolute(v)` raises what
/// [`Count::read`] reads to at least `v` (see `raise_to`). Only for
/// [`Kind::Counter`] types: a gauge has no count to raise.
macro_rules! counter_fn {
    ($($(#[$doc:meta])* $t:ty;)*) => {$(
        const _: () = assert!(matches!(<$t as Count>::KIND, Kind::Counter));

        $(#[$doc])*
        impl CounterFn for $t {
            #[inline]
            fn increment(&self, value: u64) {
                self.add(value);
            }

            fn absolute(&self, value: u64) {
                raise_to(
                    std::ptr::from_ref(self).addr(),
                    value,
                    || Count::read(self),
                    |d| self.add(d),
                );
            }
        }
    )*};
}

counter_fn! {
    /// `increment(v)` is [`add(v)`](Counter::add). `absolute(v)` raises the
    /// counter to at least `v`.
    ///
    /// # What `absolute` guarantees
    ///
    /// It reads [`sum`](Counter::sum) and, if that is below `v`, adds the
    /// difference. Calls to `absolute` on one counter are serialised by a lock
    /// (one of 64 process-wide, picked by the counter's address); increments
    /// never wait for it. For add-only use (`increment`/`add` and `absolute`;
    /// no `sub`, `take` or `reset`, no wrap past 2<sup>64</sup>):
    ///
    /// * after `absolute(v)` returns, every `sum()` that happens-after it reads
    ///   at least `v`;
    /// * concurrent `absolute` calls never stack: the total never exceeds the
    ///   largest `v` passed plus what increments added, so a counter set only
    ///   through `absolute` reads exactly the largest `v` once the calls are
    ///   over, whatever their interleaving.
    ///
    /// It is not a `fetch_max`: an increment concurrent with `absolute` may be
    /// counted on top of the raised value, so the total can end up to those
    /// concurrent increments above `max(v, increments)`.
    ///
    /// ```
    /// use metrics::CounterFn;
    /// use shardcount::Counter;
    /// use std::sync::Arc;
    ///
    /// let c = Arc::new(Counter::new());
    /// let handle = metrics::Counter::from_arc(c.clone());
    /// handle.increment(3);
    /// handle.absolute(10); // raised to 10
    /// handle.absolute(4); // already above: unchanged
    /// assert_eq!(c.sum(), 10);
    /// ```
    Counter;

    /// `increment(v)` is [`add(v)`](RoughCounter::add). `absolute(v)` raises the
    /// counter to at least `v`, with the same guarantees as
    /// [`Counter`'s](#impl-CounterFn-for-Counter) (it reads the exact
    /// [`sum`](RoughCounter::sum), which reads every slot, and adds the
    /// difference to the calling thread's slot).
    ///
    /// ```
    /// use metrics::CounterFn;
    /// use shardcount::RoughCounter;
    /// use std::sync::Arc;
    ///
    /// let c = Arc::new(RoughCounter::new());
    /// let handle = metrics::Counter::from_arc(c.clone());
    /// handle.increment(3);
    /// handle.absolute(10);
    /// assert_eq!(c.sum(), 10);
    /// ```
    RoughCounter;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// Raises of one address from many threads never stack: the total is
    /// the largest value asked for, whatever the interleaving.
    #[test]
    fn raises_of_one_counter_never_stack() {
        let total = AtomicU64::new(0);
        let addr = std::ptr::from_ref(&total).addr();
        std::thread::scope(|s| {
            for v in [3, 9, 5, 7] {
                let total = &total;
                s.spawn(move || {
                    raise_to(
                        addr,
                        v,
                        || total.load(Relaxed),
                        |d| {
                            total.fetch_add(d, Relaxed);
                        },
                    );
                });
            }
        });
        assert_eq!(total.load(Relaxed), 9);
    }

    /// A raise below the count adds nothing.
    #[test]
    fn a_raise_below_the_count_adds_nothing() {
        let c = Counter::new();
        c.add(10);
        CounterFn::absolute(&c, 4);
        assert_eq!(c.sum(), 10);
        CounterFn::absolute(&c, 12);
        assert_eq!(c.sum(), 12);
    }
}
