//! Loom models of every atomic protocol in the crate, built only under the
//! crate's own cfg:
//!
//! ```sh
//! RUSTFLAGS="--cfg shardcount_loom" cargo test --release --lib loom_models
//! ```
//!
//! They live inside the crate so they can reach internals (forcing a growth,
//! starting a stock from a given split) without public test hooks. Each file
//! models the claims its type's module docs make.

mod counter;
mod grace;
mod histogram;
mod local;
mod many;
mod map;
mod merge;
mod metrics_evict;
mod owner;
mod rough;
mod stock;

/// `loom::thread`, with a `spawn` whose threads give their owner id back
/// (`owner::hand_back`) before they end. Loom drops a thread's
/// thread-locals in a `HashMap`'s order, so a thread whose lease and
/// grace word (a pinned add or read) both had destructors to run would
/// make a model nondeterministic; std runs them in a fixed order.
mod thread {
    pub(crate) use loom::thread::*;

    /// [`loom::thread::spawn`], then the id given back, as at exit.
    pub(crate) fn spawn<F, T>(f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + 'static,
        T: 'static,
    {
        loom::thread::spawn(move || {
            let r = f();
            crate::thread::owner::hand_back();
            r
        })
    }
}

/// `loom::model`, with the model's main thread giving its owner id back
/// as the model ends: its sums register it as a reader, and its lease and
/// grace word must not both be left for loom to drop (see [`thread`]).
///
/// Loom's cap on branches per execution (1,000), a guard against spin
/// loops, is raised to 10,000: a map's drop loads every chunk pointer of
/// its segments, and with a pin's word loaded (not mirrored) the maps'
/// models ran past 1,000 with no loop in sight.
fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    builder.max_branches = builder.max_branches.max(10_000);
    builder.check(move || {
        f();
        crate::thread::owner::hand_back();
    });
}
