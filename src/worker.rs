//! `Worker`: the one periodic background thread. The [`Folder`](crate::Folder),
//! the `metrics` recorder's fold thread and the exporter each hand it a
//! pass instead of writing their own stop flag, loop and join.
//!
//! # A tiny interval
//!
//! Every wait between two passes lasts at least [`MIN_WAIT`], 1 ms: any
//! interval below 1 ms, zero included, runs every 1 ms. It is never a
//! panic, and a worker never spins a core. Each public constructor or
//! setter that takes a worker's interval states this rule and links here.
//! (`RoughCounter::with_interval` is not a worker: its zero means "fold at
//! every check".)
//!
//! # Protocol
//!
//! The handle and the thread share a `Mutex<Flags>` (`stop`, `woken`) and a
//! `Condvar`; no atomics, the mutex orders everything. The thread holds the
//! lock only while it waits: until the deadline, a wake or a stop. It lets
//! go before running the pass, so `wake` never waits for a pass and `stop`
//! waits only in its join. `stop` is checked before every pass, so a stop
//! during a pass ends the thread when that pass returns. A wake during a
//! pass ends the next wait at once: some pass always starts after the last
//! wake. A pass that panics does not end the thread: the panic hook
//! reports it and the next pass runs after the usual wait, but at least
//! [`AFTER_PANIC`] later (a background task that stopped silently would
//! export, fold or return nothing more, with nobody told; one that
//! panics every time reports it once a second at most). The owners lock a
//! pass's state ignoring poison: what a panicking pass had done (a fold,
//! a delivery) stays done, and the next pass carries on from there.

use crate::primitive::sync::{lock, Arc, Condvar, Mutex};
use std::sync::PoisonError;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The shortest wait between passes; see the module docs.
pub(crate) const MIN_WAIT: Duration = Duration::from_millis(1);

/// The least wait after a pass that panicked; see the module docs.
pub(crate) const AFTER_PANIC: Duration = Duration::from_secs(1);

/// The wait a worker keeps for `interval`: the module docs' rule.
pub(crate) fn effective(interval: Duration) -> Duration {
    interval.max(MIN_WAIT)
}

#[derive(Default)]
struct Flags {
    stop: bool,
    woken: bool,
}

/// The stop flag and the wake-up, shared by the worker and its thread.
#[derive(Default)]
struct Signal {
    flags: Mutex<Flags>,
    cond: Condvar,
}

/// A named thread running a pass periodically until stopped; dropping it
/// stops and joins the thread.
pub(crate) struct Worker {
    shared: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts thread `name` running `pass` every `interval` (the module
    /// docs' rule for a tiny one), the first time one interval from now.
    ///
    /// # Panics
    ///
    /// If the thread cannot be spawned.
    pub(crate) fn spawn(
        name: &str,
        interval: Duration,
        mut pass: impl FnMut() + Send + 'static,
    ) -> Worker {
        Worker::spawn_paced(name, interval, move || {
            pass();
            interval
        })
    }

    /// As [`spawn`](Self::spawn), but each pass returns how long to wait
    /// before the next one (a back-off after a failure, say); the first
    /// pass runs `first` from now. The same rule holds for every wait.
    pub(crate) fn spawn_paced(
        name: &str,
        first: Duration,
        pass: impl FnMut() -> Duration + Send + 'static,
    ) -> Worker {
        let shared = Arc::new(Signal::default());
        let thread = thread::Builder::new()
            .name(name.to_owned())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared, first, pass)
            })
            .unwrap_or_else(|e| panic!("shardcount: could not spawn thread {name}: {e}"));
        Worker {
            shared,
            thread: Some(thread),
        }
    }

    /// Runs a pass soon, without waiting for the interval; the waits after
    /// it are as usual. Returns at once.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "part of the worker's contract; no owner wakes it yet"
        )
    )]
    pub(crate) fn wake(&self) {
        lock(&self.shared.flags).woken = true;
        self.shared.cond.notify_all();
    }

    /// Stops the thread and waits for it (for the pass in progress, if
    /// any). Later calls, and the drop, do nothing.
    pub(crate) fn stop(&mut self) {
        let Some(t) = self.thread.take() else {
            return;
        };
        lock(&self.shared.flags).stop = true;
        self.shared.cond.notify_all();
        // A pass that drops its own worker would wait for itself; it
        // returns instead, and the flag ends the thread after that pass.
        if t.thread().id() != thread::current().id() {
            // Passes' panics are caught in `run`; a destructor has no one
            // to hand any other to.
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &Signal, first: Duration, mut pass: impl FnMut() -> Duration) {
    let mut wait = first;
    loop {
        // None: a wait too long to represent as an instant lasts until a
        // wake or a stop.
        let deadline = Instant::now().checked_add(effective(wait));
        // A pass may have added to sharded counters: asleep, this thread
        // must not hold merges pending.
        crate::thread::owner::quiesce();
        let mut flags = lock(&shared.flags);
        loop {
            if flags.stop {
                return;
            }
            if flags.woken {
                flags.woken = false;
                break;
            }
            flags = match deadline {
                None => shared
                    .cond
                    .wait(flags)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    shared
                        .cond
                        .wait_timeout(flags, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        drop(flags);
        wait = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut pass)) {
            Ok(next) => next,
            Err(_) => wait.max(AFTER_PANIC),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;

    /// Long enough to never pass within a test: a pass that runs did not
    /// wait for it.
    const HOUR: Duration = Duration::from_secs(3600);
    /// Only a hang detector: every wait here normally ends in milliseconds.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// A worker whose passes send its thread's name.
    fn reporting(interval: Duration) -> (Worker, mpsc::Receiver<Option<String>>) {
        let (tx, rx) = mpsc::channel();
        let w = Worker::spawn("shardcount-test", interval, move || {
            let _ = tx.send(thread::current().name().map(str::to_owned));
        });
        (w, rx)
    }

    #[test]
    fn runs_passes_on_its_named_thread() {
        let (_w, rx) = reporting(Duration::from_millis(1));
        for _ in 0..3 {
            let name = rx.recv_timeout(PATIENCE).expect("no pass ran");
            assert_eq!(name.as_deref(), Some("shardcount-test"));
        }
    }

    #[test]
    fn wake_runs_a_pass_early() {
        let (w, rx) = reporting(HOUR);
        for _ in 0..2 {
            w.wake();
            rx.recv_timeout(PATIENCE).expect("a wake ran no pass");
        }
    }

    #[test]
    fn a_pass_sets_the_next_wait() {
        let (tx, rx) = mpsc::channel();
        // Only a wake starts the first pass; every pass then asks for the
        // next one right away.
        let w = Worker::spawn_paced("shardcount-test", HOUR, move || {
            let _ = tx.send(());
            Duration::ZERO
        });
        w.wake();
        for _ in 0..3 {
            rx.recv_timeout(PATIENCE)
                .expect("the returned wait was not used");
        }
    }

    /// Runs `f` on another thread; whether it returned within `PATIENCE`.
    fn returns(f: impl FnOnce() + Send + 'static) -> bool {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(PATIENCE).is_ok()
    }

    #[test]
    fn drop_stops_and_joins_while_it_waits() {
        let held = Arc::new(());
        let w = Worker::spawn("shardcount-test", HOUR, {
            let held = Arc::clone(&held);
            move || _ = Arc::clone(&held)
        });
        assert!(returns(move || drop(w)), "drop waited for the interval");
        // The pass (and what it held) is gone: the thread has ended.
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[test]
    fn a_pass_that_panicked_runs_again_later_and_drop_returns() {
        let (tx, rx) = mpsc::channel::<u32>();
        let mut n = 0;
        let start = Instant::now();
        let w = Worker::spawn("shardcount-test", Duration::from_millis(1), move || {
            n += 1;
            let _ = tx.send(n);
            if n == 1 {
                panic!("a pass that fails once");
            }
        });
        assert_eq!(rx.recv_timeout(PATIENCE), Ok(1));
        assert_eq!(
            rx.recv_timeout(PATIENCE),
            Ok(2),
            "the worker stopped after a panic"
        );
        assert!(start.elapsed() >= AFTER_PANIC, "no pause after the panic");
        assert!(returns(move || drop(w)), "drop hung after a panic");
    }

    #[test]
    fn a_pass_may_drop_its_own_worker() {
        let slot: Arc<Mutex<Option<Worker>>> = Arc::default();
        let (tx, rx) = mpsc::channel();
        let w = Worker::spawn("shardcount-test", HOUR, {
            let slot = Arc::clone(&slot);
            move || {
                drop(lock(&slot).take());
                let _ = tx.send(());
            }
        });
        let mut slot_now = lock(&slot);
        *slot_now = Some(w);
        slot_now.as_ref().unwrap().wake();
        drop(slot_now);
        assert_eq!(rx.recv_timeout(PATIENCE), Ok(()));
        // That pass stopped the worker without joining itself: the thread
        // ends when it returns, dropping the closure and `tx`.
        let ended = rx.recv_timeout(PATIENCE);
        assert_eq!(ended, Err(mpsc::RecvTimeoutError::Disconnected));
        assert!(lock(&slot).is_none());
    }

    /// Zero means every 1 ms: passes run, and at most one starts per
    /// elapsed millisecond (plus the one in progress), never a spin.
    #[test]
    fn zero_interval_runs_every_millisecond() {
        assert_eq!(effective(Duration::ZERO), MIN_WAIT);
        assert_eq!(effective(Duration::from_nanos(999_999)), MIN_WAIT);
        assert_eq!(
            effective(Duration::from_millis(2)),
            Duration::from_millis(2)
        );
        let passes = Arc::new(AtomicU64::new(0));
        // Before the spawn: every pass starts at least 1 ms after this.
        let start = Instant::now();
        let w = Worker::spawn("shardcount-test", Duration::ZERO, {
            let passes = Arc::clone(&passes);
            // Relaxed: read after the join below, which orders it.
            move || _ = passes.fetch_add(1, Ordering::Relaxed)
        });
        while passes.load(Ordering::Relaxed) == 0 {
            assert!(start.elapsed() < PATIENCE, "no pass ran");
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(100));
        drop(w);
        let elapsed = start.elapsed();
        let n = passes.load(Ordering::Relaxed);
        assert!(n > 0 && n < 100_000, "{n} passes");
        // Pass k starts at least k ms after `start`, and all had started
        // when the drop returned.
        let bound = elapsed.as_millis() as u64;
        assert!(n <= bound, "{n} passes in {elapsed:?}");
    }
}
