//! Loom model of `Histogram`'s record (`src/set/pair.rs`): two words of
//! one row per record, through the set's row choice, growth and take
//! guard. Not a new protocol; this checks that the pair add uses it as the
//! set's own add does: nothing lost or doubled across takes and a growth.

use super::thread;
use crate::primitive::sync::Arc;
use crate::shard::GrowOnce;
use crate::Histogram;

/// Takes racing records and a growth: every record's bucket and value are
/// in exactly one take or in the final snapshot.
#[test]
fn histogram_takes_racing_records_and_growth() {
    super::model(|| {
        let h = Arc::new(Histogram::with_bounds(&[10]));
        let recorder = {
            let h = h.clone();
            thread::spawn(move || {
                h.record(5);
                h.record(50);
            })
        };
        let taker = {
            let h = h.clone();
            thread::spawn(move || {
                h.grow_once();
                h.take()
            })
        };
        let mut all = h.take();
        all.merge(&taker.join().unwrap());
        recorder.join().unwrap();
        all.merge(&h.snapshot());
        let counts: Vec<u64> = all.buckets().map(|b| b.count).collect();
        assert_eq!(counts, [1, 1]);
        assert_eq!(all.sum(), 55);
    });
}
