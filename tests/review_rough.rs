//! Review findings for `RoughCounter` and `Folder` (adversarial review).

use shardcount::{Folder, RoughCounter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

/// Signed distance `sum - approx`, the "lag" of an up/down counter.
fn lag(c: &RoughCounter) -> i64 {
    c.sum().wrapping_sub(c.approx()) as i64
}

/// The docs promise that a thread's unfolded delta is folded once its
/// *magnitude* reaches `batch`, so at rest `|sum - approx|` stays below
/// live slots × batch. A fold by someone other than the owner's own check
/// (`flush`, `flush_all`, a `Folder`) moves `folded` without re-arming the
/// owner's check window, which stays centred on the old total; with adds and
/// subs the delta can then swing to almost 2 × batch without any check.
#[test]
fn review_foreign_fold_lets_unfolded_delta_exceed_batch() {
    const BATCH: u64 = 10;
    let c = Arc::new(
        RoughCounter::new()
            .with_batch(BATCH)
            .with_interval(Duration::MAX),
    );
    let (added_tx, added_rx) = mpsc::channel();
    let (folded_tx, folded_rx) = mpsc::channel::<()>();
    let owner = thread::spawn({
        let c = Arc::clone(&c);
        move || {
            c.add(9); // below the batch: not folded
            added_tx.send(()).unwrap();
            folded_rx.recv().unwrap(); // another thread folds our +9 here
            c.sub(9);
            c.sub(9); // total -9, folded +9: |delta| = 18, no fold ran
            let l = lag(&c);
            assert!(
                l.unsigned_abs() < BATCH,
                "unfolded delta {l} reached {} batches without a fold",
                l.unsigned_abs() as f64 / BATCH as f64
            );
        }
    });
    added_rx.recv().unwrap();
    c.flush_all(); // e.g. a Folder pass
    folded_tx.send(()).unwrap();
    owner.join().unwrap();
}

/// `Folder::new` documents one panic: a zero interval. A huge interval (a
/// caller meaning "never", as `with_interval(Duration::MAX)` does for
/// `RoughCounter`) is accepted, and the background thread then panics on
/// `Instant + Duration` overflow; the folder silently does nothing, and its
/// `Drop` swallows the panic.
#[test]
fn review_folder_with_huge_interval_does_not_panic_in_background() {
    static FOLDER_PANICKED: AtomicBool = AtomicBool::new(false);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if thread::current().name() == Some("shardcount-folder") {
            FOLDER_PANICKED.store(true, Ordering::SeqCst);
        }
        prev(info);
    }));
    let folder = Folder::new(Duration::MAX);
    let c = RoughCounter::new();
    folder.register(&c); // waits for the folder thread to drop the lock
    drop(folder); // joins the thread
    assert!(
        !FOLDER_PANICKED.load(Ordering::SeqCst),
        "the folder thread panicked on an interval Folder::new accepted"
    );
}
