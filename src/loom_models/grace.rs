//! Grace periods (`src/thread/grace.rs`): a pinned section that loaded a
//! pointer before it was unlinked ends before the free that follows the
//! grace period. The "table" is a loom cell: a read of it that is not
//! ordered before the free's write fails the model.

use super::thread;
use crate::thread::grace;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;

/// Reads the table if it is still linked.
fn read(linked: &AtomicBool, table: &UnsafeCell<u64>) -> Option<u64> {
    // Relaxed: the pin's barrier and the grace period order it (module
    // docs of grace.rs).
    linked
        .load(Ordering::Relaxed)
        // SAFETY: loom checks that this read and the free's write are
        // ordered; that is the claim under test.
        .then(|| table.with(|p| unsafe { *p }))
}

/// A reader whose section nests a second pin (dropped before the read, so
/// only the outer one protects it) and then runs a second section, racing
/// an unlink, a grace period and a free.
///
/// Three preemptions at least: the bug this found (a grace period that saw
/// the second section's mark, stored without `Release`, and so did not
/// learn that the first had ended) needs them; the model is small enough.
#[test]
fn grace_period_waits_for_nested_and_repeated_sections() {
    let mut model = loom::model::Builder::new();
    if let Some(b) = model.preemption_bound {
        model.preemption_bound = Some(b.max(3));
    }
    model.check(|| {
        let linked = Arc::new(AtomicBool::new(true));
        let table = Arc::new(UnsafeCell::new(7u64));
        let reader = {
            let (linked, table) = (linked.clone(), table.clone());
            thread::spawn(move || {
                let outer = grace::pin();
                drop(grace::pin());
                let first = read(&linked, &table);
                drop(outer);
                let again = grace::pin();
                let second = read(&linked, &table);
                drop(again);
                (first, second)
            })
        };
        linked.store(false, Ordering::Relaxed);
        grace::wait();
        // The free: a write no section may race.
        // SAFETY: loom checks that no read races this write; that is the
        // claim under test.
        table.with_mut(|p| unsafe { *p = 0 });
        let (first, second) = reader.join().unwrap();
        assert!(matches!(first, None | Some(7)), "{first:?}");
        assert!(matches!(second, None | Some(7)), "{second:?}");
    });
}
