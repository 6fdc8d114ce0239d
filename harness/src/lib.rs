//! The measuring harness of `shardcount`'s benches, demos and `hotpath`
//! (internal; not published).
//!
//! * [`measure`]: the compiler barrier ([`opaque`](measure::opaque)), the
//!   one-time address escape, thread pinning, pinned threads that time
//!   themselves, the empty-loop canary, and the paired
//!   [`Session`](measure::Session) that prints each subject as a fraction
//!   of a reference measured in the same repetition.
//! * [`subjects`]: the one [`Subject`](subjects::Subject) trait for counting
//!   subjects, every kind (shardcount's, the references, the peers) and a
//!   visitor over them, plus checked timing loops.
//! * [`labels`]: the label types figures over labels walk.
//! * [`inventory`]: the take-style [`Inventory`](inventory::Inventory)
//!   trait for `Stock` and its compare-exchange baseline.
//!
//! It depends on `shardcount` by path and is a dev-dependency of it, so the
//! benches and examples see one `shardcount` and these impls apply to its
//! types. The method and its traps are in `shared/notes/measuring-here.md`.

pub mod inventory;
pub mod labels;
pub mod measure;
pub mod subjects;

/// The peer crates, for code that needs more than their [`subjects`] impls
/// (the suite sizes `fast-counter`'s shard table itself).
pub mod peers {
    pub use ::contatori;
    pub use ::dashmap;
    pub use ::fast_counter;
    pub use ::fast_telemetry;
    pub use ::metrics;
    pub use ::prometheus_client;
    pub use ::thread_local;
}
