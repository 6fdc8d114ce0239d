//! `RoughCounter`: each thread counts in its own slot with no locked
//! instruction; the counts are folded now and then into one global tally that
//! [`approx`](RoughCounter::approx) reads (with the counter's own word for
//! adds made inside its allocations: two loads).
//!
//! * `slot.rs`: the slots, the tally and the fold protocol (the proofs of the
//!   read guarantees are there);
//! * `clock.rs`: the clock the interval rule reads at checks;
//! * `folder.rs`: the background [`Folder`](crate::Folder);
//! * `rough_counter.rs`: the API, and the add path over `thread::slots`.
//!
//! The counter itself is one pointer, `shared: AtomicPtr<Core>`: null until
//! first use, then an `Arc<Core>` turned into a raw pointer, installed once
//! by a compare-exchange (`AcqRel`; readers that dereference it use an
//! `Acquire` load, or a `Relaxed` one and an `Acquire` fence: `add_table`).
//! Every other ordering here is a role of `slot.rs`'s protocol (the tally,
//! owner-only bookkeeping, the `dropped` hint), stated there.

mod clock;
#[cfg(not(shardcount_loom))]
pub(crate) mod folder;
mod rough_counter;
mod slot;

pub use rough_counter::RoughCounter;
