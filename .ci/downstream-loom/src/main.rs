//! Compiles only if `--cfg loom` leaves shardcount's API as it is.
use shardcount::{Counter, Folder, RoughCounter};
use std::time::Duration;

static HITS: Counter = Counter::new();
static CAPPED: Counter = Counter::with_max_shards(4);
static ROUGH: RoughCounter = RoughCounter::new().with_batch(8);

fn main() {
    HITS.inc();
    CAPPED.add(2);
    ROUGH.add(3);
    let folder = Folder::new(Duration::from_millis(1));
    folder.register(&ROUGH);
    drop(folder);
    assert_eq!((HITS.sum(), CAPPED.sum(), ROUGH.sum()), (1, 2, 3));
    #[cfg(loom)]
    println!("downstream built with --cfg loom: shardcount's API unchanged");
}
