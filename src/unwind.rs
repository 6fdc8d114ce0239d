//! [`FirstPanic`]: a pass over many keys or sources runs to its end when
//! user code in one of them panics (a recorder underneath, an export
//! source), and the first panic goes on afterwards. One broken key then
//! delays nobody else's counts, and the caller still sees the panic.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// The first panic caught in a pass, to resume at its end.
#[derive(Default)]
pub(crate) struct FirstPanic(Option<Box<dyn Any + Send>>);

impl FirstPanic {
    /// Runs `f`; a panic in it is kept (the first one of the pass) and
    /// `None` returned. What `f` touches must be left consistent by an
    /// unwind at any point (each caller's own concern: a fold hands its
    /// delta back, a list is folded in place).
    pub(crate) fn run<T>(&mut self, f: impl FnOnce() -> T) -> Option<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(t) => Some(t),
            Err(panic) => {
                self.0.get_or_insert(panic);
                None
            }
        }
    }

    /// Lets the first panic kept go on, if there was one.
    pub(crate) fn finish(self) {
        if let Some(panic) = self.0 {
            resume_unwind(panic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FirstPanic;

    /// Every part runs; the first panic, not a later one, goes on.
    #[test]
    fn every_part_runs_and_the_first_panic_goes_on() {
        let mut ran = Vec::new();
        let mut panics = FirstPanic::default();
        for i in 0..4 {
            let r = panics.run(|| {
                ran.push(i);
                if i % 2 == 1 {
                    std::panic::panic_any(i);
                }
                i
            });
            assert_eq!(r.is_some(), i % 2 == 0);
        }
        assert_eq!(ran, [0, 1, 2, 3]);
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panics.finish()));
        assert_eq!(first.unwrap_err().downcast_ref::<i32>(), Some(&1));
        FirstPanic::default().finish();
    }
}
