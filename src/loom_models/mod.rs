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
