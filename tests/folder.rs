#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `Folder`: the background thread never keeps its handle waiting.

use shardcount::{Folder, RoughCounter};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Runs `f` on another thread and says whether it returned within `limit`.
/// A call that hangs leaves its thread behind; the test fails instead of
/// hanging with it.
fn returns_within(limit: Duration, f: impl FnOnce() + Send + 'static) -> bool {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(limit).is_ok()
}

/// With an interval shorter than a clock read, the thread used to loop with
/// its lock held and never wait: `register`, `registered`, `passes`, `Debug`
/// and `drop` then blocked for ever.
#[test]
fn tiny_interval_never_blocks_the_handle() {
    for interval in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_nanos(10),
        Duration::from_micros(1),
    ] {
        let ok = returns_within(Duration::from_secs(20), move || {
            let folder = Folder::new(interval);
            let c = RoughCounter::new();
            c.add(3);
            // Let the thread start and run passes back to back.
            while folder.passes() < 3 {
                thread::sleep(Duration::from_millis(1));
            }
            for _ in 0..100 {
                folder.register(&c);
            }
            assert_eq!(folder.registered(), 100);
            let _ = format!("{folder:?}");
            drop(folder);
        });
        assert!(ok, "Folder with interval {interval:?} blocked its handle");
    }
}

/// Any interval below 1 ms, zero included, runs every 1 ms: no panic, and
/// the folder folds.
#[test]
fn zero_interval_folds_every_millisecond() {
    let folder = Folder::new(Duration::ZERO);
    assert_eq!(folder.interval(), Duration::from_millis(1));
    assert_eq!(folder.interval(), Folder::MIN_INTERVAL);
    let c = RoughCounter::new();
    folder.register(&c);
    c.add(3); // far below the batch: only a fold makes approx() see it
    let ok = returns_within(Duration::from_secs(20), move || {
        while c.approx() != 3 {
            thread::sleep(Duration::from_millis(1));
        }
    });
    assert!(ok, "a zero-interval folder never folded");
}
