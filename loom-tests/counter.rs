#![cfg(loom)]
//! Loom models of `Counter`'s protocol (see the module docs of `src/counter.rs`).

use loom::sync::Arc;
use loom::thread;
use shardcount::Counter;

#[test]
fn smoke() {
    loom::model(|| {
        let c = Arc::new(Counter::new());
        let c2 = c.clone();
        let h = thread::spawn(move || c2.inc());
        c.inc();
        h.join().unwrap();
        assert_eq!(c.sum(), 2);
    });
}
