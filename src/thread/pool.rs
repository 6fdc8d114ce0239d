//! A pool of small, dense, reused numbers (1, 2, ...): thread indexes and
//! owner ids each come from one, so a table indexed by them stays as small
//! as the number of holders alive at once. Callers keep it behind a mutex.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(crate) struct Pool {
    /// The next number never handed out.
    next: usize,
    /// Given back, smallest first, so the numbers in use stay dense.
    free: BinaryHeap<Reverse<usize>>,
}

impl Pool {
    pub(crate) fn new() -> Self {
        Pool {
            next: 1,
            free: BinaryHeap::new(),
        }
    }

    /// The smallest number given back, or a new one.
    pub(crate) fn take(&mut self) -> usize {
        match self.free.pop() {
            Some(Reverse(i)) => i,
            None => {
                self.next += 1;
                self.next - 1
            }
        }
    }

    /// Gives `i` (from [`take`](Self::take)) back for reuse.
    pub(crate) fn give(&mut self, i: usize) {
        self.free.push(Reverse(i));
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_dense_and_the_smallest_free_comes_first() {
        let mut p = Pool::new();
        assert_eq!((p.take(), p.take(), p.take()), (1, 2, 3));
        p.give(3);
        p.give(1);
        assert_eq!(p.take(), 1);
        assert_eq!(p.take(), 3);
        assert_eq!(p.take(), 4);
    }
}
