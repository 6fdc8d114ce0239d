//! Adds made while the same thread is inside one of the crate's own slow
//! paths: from a global allocator that counts with shardcount (the slow
//! path allocated), or from a signal handler that interrupted one (adds
//! are not async-signal-safe in general: `Counter`'s docs). Such an add
//! must not take
//! a slow path itself, which could allocate again and recurse until the
//! stack runs out; the types count it where no allocation is needed (a
//! `Counter`'s base word, a set's base row, a `RoughCounter`'s own word)
//! and skip contention checks, which may grow a table.
//!
//! One flag per thread, in a `const` thread-local without a destructor:
//! set by the outermost slow path ([`enter`]) and cleared when its guard
//! drops. Only the thread itself reads or writes it.

use crate::primitive::const_thread_local;
use std::cell::Cell;

const_thread_local! {
    static INSIDE: Cell<bool> = Cell::new(false);
}

/// The calling thread is inside a slow path until this drops. Not `Send`:
/// dropped on another thread it would clear that thread's flag.
#[must_use]
pub(crate) struct Inside(std::marker::PhantomData<*const ()>);

impl Drop for Inside {
    fn drop(&mut self) {
        // Ignoring the error: at thread exit the flag may be gone, and with
        // it every reader.
        let _ = INSIDE.try_with(|f| f.set(false));
    }
}

/// Marks the calling thread inside a slow path that may allocate, or
/// `None` if it already is: the caller then must not allocate, and counts
/// its add where no allocation is needed. (Where the flag is gone, as
/// loom's thread-locals at thread exit, nothing is inside: a guard that
/// marks nothing.)
#[inline]
pub(crate) fn enter() -> Option<Inside> {
    match INSIDE.try_with(|f| f.replace(true)) {
        Ok(true) => None,
        _ => Some(Inside(std::marker::PhantomData)),
    }
}

/// Whether the calling thread is inside a slow path (an add from there
/// must not allocate).
#[inline]
pub(crate) fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(false)
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_the_outermost_slow_path_enters_until_its_guard_drops() {
        let outer = enter().expect("not inside yet");
        assert!(enter().is_none(), "a nested slow path entered");
        assert!(enter().is_none(), "a refused entry cleared the flag");
        assert!(inside());
        drop(outer);
        assert!(!inside());
        assert!(enter().is_some(), "the guard did not clear the flag");
    }
}
