//! Takes racing adds and growth on real threads, for every owner of a take:
//! the takes and what stays must add up to what was added, exactly.

use crate::shard::GrowOnce;
use crate::{Counter, CounterMap, CounterSet, MaxCounter, MinCounter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

const ADDERS: u64 = 3;
const ADDS: u64 = 20_000;

/// Runs `ADDERS` threads that each call `add(t, i)` `ADDS` times while
/// this thread calls `take` until they are done (growing with `grow`
/// between takes), then returns the sum of every take.
fn race(add: impl Fn(u64, u64) + Sync, take: impl Fn() -> u64, grow: impl Fn()) -> u64 {
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let adders: Vec<_> = (0..ADDERS)
            .map(|t| {
                let add = &add;
                s.spawn(move || (0..ADDS).for_each(|i| add(t, i)))
            })
            .collect();
        let stopper = s.spawn(|| {
            adders.into_iter().for_each(|a| a.join().unwrap());
            // Relaxed: the scope's join orders everything after.
            done.store(true, Ordering::Relaxed);
        });
        let mut taken = 0u64;
        let mut rounds = 0u32;
        // Relaxed: only a stop signal; the final read comes after the join.
        while !done.load(Ordering::Relaxed) {
            taken += take();
            rounds += 1;
            if rounds.is_multiple_of(64) {
                grow();
            }
        }
        stopper.join().unwrap();
        taken
    })
}

#[test]
fn counter_takes_racing_adds_and_growth_add_up() {
    let c = Counter::with_max_shards(64);
    let taken = race(|_, _| c.add(3), || c.take(), || c.grow_once());
    assert_eq!(taken + c.sum(), 3 * ADDERS * ADDS);
}

#[test]
fn counter_set_takes_racing_adds_and_growth_add_up() {
    let s = CounterSet::with_max_shards(40, 64);
    // Counter 17 is taken alone, the rest with take_all.
    let all = race(
        |t, i| s.add(((t + i) % 40) as usize, 1),
        || s.take(17).unwrap() + s.take_all().iter().sum::<u64>(),
        || s.grow_once(),
    );
    assert_eq!(all + s.snapshot().iter().sum::<u64>(), ADDERS * ADDS);
}

#[test]
fn counter_map_takes_racing_adds_add_up() {
    let m: CounterMap<u64> = CounterMap::with_max_keys(300);
    let h = m.handle(&0);
    let taken = race(
        // 400 keys: some beyond the bound, in the overflow counter.
        |t, i| {
            if i % 2 == 0 {
                h.inc();
            } else {
                m.inc(&((t * 7 + i) % 400));
            }
        },
        || {
            m.take(&1).unwrap_or(0)
                + h.take()
                + m.take_all().iter().map(|e| e.1).sum::<u64>()
                + m.take_overflow()
        },
        || {},
    );
    let kept = m.snapshot().iter().map(|e| e.1).sum::<u64>() + m.overflow();
    assert_eq!(taken + kept, ADDERS * ADDS);
}

#[test]
fn extremum_takes_racing_records_and_growth_lose_no_maximum() {
    let (max, min) = (MaxCounter::new(), MinCounter::new());
    let top = ADDS - 1;
    let seen = std::sync::Mutex::new((0u64, u64::MAX));
    let taken = race(
        |_, i| {
            max.record(i);
            min.record(top - i);
        },
        || {
            let (a, b) = (max.take(), min.take());
            let mut seen = seen.lock().unwrap();
            *seen = (seen.0.max(a), seen.1.min(b));
            assert!(
                a <= top && (b <= top || b == u64::MAX),
                "never recorded: {a}, {b}"
            );
            0
        },
        || max.grow_once(),
    );
    assert_eq!(taken, 0);
    let (a, b) = *seen.lock().unwrap();
    assert_eq!(a.max(max.get()), top);
    assert_eq!(b.min(min.get()), 0);
}
