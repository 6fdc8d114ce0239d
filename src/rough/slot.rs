//! The fold protocol: per-thread slots, the tally, and how a slot's counts
//! move into the tally without loss, double counting or a lag beyond the
//! batch.
//!
//! # Protocol
//!
//! The counter itself is one pointer, `shared: AtomicPtr<Core>`: null until
//! first use, then an `Arc<Core>` turned into a raw pointer, installed once
//! by a compare-exchange (`AcqRel`; readers that dereference it use an
//! `Acquire` load, or a `Relaxed` one and an `Acquire` fence: `add_table`).
//! `Core` holds:
//!
//! * `tally: AtomicU64`: the folded counts. Only folds write it, each with one
//!   `fetch_add(.., Release)`; `approx` loads it with `Acquire`.
//! * `slots: SlotTable<Slot>`: one slot per thread index (see
//!   `thread::slots`), allocated in buckets on first use and freed only when
//!   `Core` is. A thread reaches its slot in O(1), however many counters
//!   it uses.
//! * `orphan: Slot`: a slot no thread owns, for adds made after the calling
//!   thread's slot table was destroyed (from another thread-local's
//!   destructor). Each such add is a `fetch_add` of its `biased` (its `bias`
//!   stays 0, so that is its total), a bump of
//!   its `armed` (below) and a fold, at once.
//! * `dropped: AtomicBool`: set when the counter is dropped, a hint for
//!   exit registries and folders to let go early: `Relaxed` both ways, as
//!   each reader holds its own reference, so seeing it late only delays
//!   freeing.
//!
//! Each `Slot` holds:
//!
//! * the slot's **total**: the cumulative sum of every add ever made
//!   through the slot, kept as the hot word minus `bias` (wrapping). The
//!   hot word is `biased` until the slot is first taken over, then an
//!   arena word (`word`, see "Finding the slot"): only the owning thread
//!   writes it, with one unlocked add to memory (a `Relaxed` load + store:
//!   no locked instruction), and the owner sets `bias` so that the add
//!   carries out of 64 bits exactly when it reaches the window's upper
//!   end. The owner rewrites `bias` and the hot word together only at a
//!   check (`set_headroom`), a takeover or a hand-back, as a sequence
//!   lock: it stores the total in `stable` (`Release`), makes `seq` odd
//!   (`Release`), issues a `Release` fence, stores the pair, and makes
//!   `seq` even (`Release`), except at a hand-back, which leaves it odd
//!   until the next takeover. A reader (`Slot::total`) loads `seq`
//!   (`Acquire`), `bias`, `word` and the hot word, issues an `Acquire`
//!   fence and loads `seq` again: if it was even and did not move, the
//!   pair agrees; otherwise it reads `stable` (`Acquire`), the total all
//!   through the rewrite, as nothing adds to it meanwhile. So a read never waits for the owner,
//!   returns a total the slot had during the call, and never goes back
//!   for one reader (a `stable` read from a later rewrite acquires
//!   everything stored before it). The total is never reset: when a thread
//!   exits, its slot is folded and freed, and the next thread to take the
//!   same thread index continues the same total. So `sum()` is simply the
//!   sum of every slot's total; it never reads the tally and folding
//!   cannot make it count anything twice.
//! * `folded: AtomicU64`: the part of `total` already added to the tally.
//!   Any thread may fold any slot: it loads `armed` and `folded` (both
//!   `Acquire`), then `total`, claims the range by a compare-exchange of
//!   `folded` from the old value to the loaded total (`AcqRel`), adds the
//!   difference to the tally, and loads `armed` again (`Acquire`); if that
//!   moved, it claims again from the total it installed (see below). Every
//!   write of `folded` is a read-modify-write. The tally always changes by
//!   exactly what `folded` changed by, so once all folds are finished,
//!   `tally == Σ folded`, and after a final fold, `approx() == sum()`.
//! * `tallied: AtomicU64`: the claimed amounts that have reached the tally.
//!   After its tally add, each claim adds its amount here (`Release` RMW), so
//!   `tallied == folded` exactly when no claim of the slot is in flight. A
//!   fold that finds nothing left to claim may be racing a claim that is
//!   not in the tally yet (an exit fold after `thread::scope`, a `Folder`
//!   pass); `flush`, `flush_all` and the exit fold therefore fold and then
//!   wait, with `Acquire` loads, until `tallied` reaches the `folded` they
//!   saw (`fold_and_wait`): every write of `tallied` is an RMW, so the load
//!   that reads that value synchronises with every claim's tally add. The
//!   wait ends when the claimants run a few more instructions; a slot
//!   whose `folded` moves meanwhile (its owner adds and folds) is not
//!   waited for, so the wait never chases a busy owner.
//! * `armed: AtomicU64`: the slot's generation. The owner, its only writer,
//!   bumps it (`Relaxed` load, `Release` store) at each slow check, when it
//!   takes the slot and before the fold that gives the slot back, and then
//!   reads `folded` by a `fetch_add(0, Release)`. The orphan's is bumped by every orphan add,
//!   with `fetch_add(1, Release)`, followed by the same read of `folded`.
//! * `in_use: AtomicBool`: whether a thread owns the slot. Only the thread
//!   holding the slot's index writes it: `true` at its first add (the
//!   takeover, `Relaxed`: `live_slots` needs no more than a current value),
//!   `false` with `Release` when it exits. The next holder of the
//!   index happens-after that exit (the index pool is a mutex), so it sees
//!   the last `total` its predecessor wrote.
//! * owner-only bookkeeping (`lo`, `width`, `last_fold`, `last_check`,
//!   `span`, and copies of `bias` and `seq` for the owner's own reads),
//!   `Relaxed` `UnsharedU64`s: only the thread holding the slot's index
//!   touches them, and the index pool's mutex hands them over with the
//!   index.
//!
//! # Why `approx() ≤ sum()` for add-only use
//!
//! A fold reads `total` before its `Release` add to the tally. A thread whose
//! `Acquire` load of the tally sees that add (or a later one: all tally writes
//! are read-modify-writes, so they continue the release sequence) therefore
//! happens-after the fold's read of `total`, and its later `sum()` reads that
//! total or a newer one. The `Acquire`/`AcqRel` chain on `folded` makes each
//! fold read a total no older than the one the previous fold claimed (a
//! fold's second round claims from its own claim to a total it read later),
//! so for add-only use every claimed range is non-negative and the tally never
//! holds more than the totals a following `sum()` reads.
//!
//! # Why each live slot's unfolded delta stays below `batch`
//!
//! At a slow check the owner bumps `armed`, reads `folded` by an RMW (call
//! it R, and the distance `u = |t0 - folded|`, `t0` being the total then),
//! folds if `u ≥ batch` (then `u = 0`), and arms a window: the hot path
//! checks again before `total` moves `w` from `t0`, with
//! `w ≤ batch - u` and `w ≤ ⌈batch/2⌉`. While the owner is not inside an add,
//! `total` is within `w - 1` of `t0`, so `|total - folded| < batch` as long
//! as `folded` holds what R read (or the owner's fold left, `t0`) or any
//! total inside the window. A claim C of `folded` by another thread is
//! before or after R in `folded`'s modification order:
//!
//! * before: R reads C's value or a later one, and the window allows for it;
//! * after: C reads from R's release sequence (every write of `folded` is an
//!   RMW), so it synchronises with R, and the fold's load of `armed` after C
//!   sees the bump. If its load before reading `total` saw that generation
//!   too, it synchronised with the bump's `Release` store, so the total it
//!   claimed is `t0` or a newer one, inside the window. If not, its total
//!   may be from before the check, and it claims again, from that total to
//!   one it reads now, which is inside the window.
//!
//! So at an instant when the owner is not inside an add and no fold of the
//! slot is in progress, `|total - folded| < batch`. R must be an RMW: the
//! check's store to `armed` then load of `folded`, against a fold's claim
//! then load of `armed`, is the store-buffering shape, where plain loads
//! could both miss the other side's write. It costs the check one locked
//! instruction on the owner's own cache line; `bump` is unchanged.
//!
//! The same argument with the owner's exit fold in place of the window (and
//! every orphan add in place of the owner, for the orphan slot) shows that a
//! free slot, and the orphan, hold `folded == total` once their folds and
//! the claims racing them are finished. Hence, with no thread inside an add
//! and no fold in progress, `sum - approx` (a signed distance) is at most
//! live slots × (`batch` - 1) in magnitude, and 0 with no live slot.
//!
//! A fold claims again only if the generation moved between its two loads
//! of `armed`, which takes another check (at least one count by the owner)
//! or another orphan add: folds are lock-free, not wait-free.
//!
//! # Finding the slot
//!
//! A slot's hot word is `biased` until a thread first takes it over, then
//! the arena word of the slot's thread index at the counter's position
//! (`thread::arena`), the same for every later holder of the index; the
//! slot's `word` says which. The hot path loads the counter's position
//! (`Acquire`, paired with the installer's `Release`) and compares it
//! with the position the thread cached at its last takeover or check: on
//! a match it adds to the cached word, else to the word it takes from the
//! position's bucket in the thread's `Held` copy of its arena. The add is
//! one add to memory, its carry the whole test. `arm` sets the headroom to `w`, the distance to the
//! window's upper end (`biased = 2^64 - w`), so an add of less than the
//! headroom stays inside the window and one that reaches it carries; a
//! sub (an add of 2^64 - n) carries too, and the slow path tests the
//! window both ways (`lo`, `width`), setting the headroom again if the
//! total is still inside. The carrying add has been made: the owner
//! checks before its next add, so readers never see a carried word
//! without the check that follows. The total's own wrap needs no care:
//! the carry is of the word, not of the total.
//!
//! A word whose slot is not taken over is free (`u64::MAX`, a headroom of
//! 1), so any add of at least 1 to it carries: the slow path finds the
//! thread's slot (its index's bucket in `slots`, `Acquire`), sees it is
//! not the thread's, sets the word free again and adds through the table
//! (`try_bump`, which tests before it adds). A slot not taken over has an
//! empty window (`width` 0), so that add runs the slow check, which takes
//! it over: marks it in use, points its hot word at the arena word and
//! closes its sequence lock (`attach`), adds, starts a generation, arms a
//! window and asks the thread's exit registry for a [`ThreadExit`] call.
//! That call folds the slot and hands it back with a headroom of 1 (which
//! frees the word) and its sequence lock left open (`hand_back`), so
//! readers read the total from `stable` while the next holder's first add
//! carries through the word. The registry makes the call for every
//! counter before it lets go of it (at exit, or when it prunes dropped
//! counters), so a counter's block is freed, and its position given back,
//! only with every arena word at that position free. A word's writers are
//! its index's holders, one at a time, handed over by the index pool's
//! mutex; arenas are never freed, so no reader follows a pointer into
//! freed memory.
//!
//! # How often a thread checks
//!
//! Every `span` counts, from `MIN_SPAN` to `MAX_SPAN` (and at most half a
//! batch): `pace` doubles it while checks come less than a quarter of the
//! interval apart and halves it while they come more than an interval
//! apart, so a fast thread pays a check (a locked instruction and the
//! clock) once per tens of thousands of adds, and a slow one still reads
//! the clock every `MIN_SPAN` counts. With no interval (`Duration::MAX`),
//! the span is `MAX_SPAN` and the clock is never read.
use crate::primitive::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU64, Ordering, UnsharedPtr, UnsharedU32, UnsharedU64,
};
use crate::primitive::sync::Arc;
use crate::thread::arena::Position;
use crate::thread::slots::{SlotTable, ThreadExit};
use crossbeam_utils::CachePadded;
use std::ptr;

/// The fewest counts between a thread's checks of one counter (or half of
/// `batch`, if smaller): where the span starts, and where a thread that
/// adds slowly keeps it. A tuning constant, not API: `RoughCounter`'s docs
/// give the behaviour.
pub(super) const MIN_SPAN: u64 = 512;

/// The most counts between checks (or half of `batch`, if smaller), for a
/// thread that adds fast: a check costs tens of nanoseconds (a locked
/// instruction, the clock), a share of each add that this makes small.
pub(super) const MAX_SPAN: u64 = 1 << 15;

// A slot's fields fit one 128-byte line pair, as `RoughCounter`'s docs
// count its memory (loom's atomics are larger; `CachePadded` pads to 256
// bytes on a few targets, s390x among them).
#[cfg(not(shardcount_loom))]
const _: () = assert!(std::mem::size_of::<Slot>() <= 128);

/// The hot-path add to an arena word of the calling thread
/// (`thread::arena`), in one read-modify-write: the add is made whether
/// or not it is due, and its carry says which. If it carried, calls
/// `due`, which must, before the thread's next add to the word, either
/// set it free again (it was free: no slot of this thread is at it, and
/// any add of at least 1 to a free word carries) or run the owner's
/// [`window_passed`](Slot::window_passed) and check. An add of 0 never
/// carries (it changes nothing).
///
/// Only the index's holder writes the word while it is not free, so the
/// add needs no locked instruction; a reader reads it only through a
/// slot's sequence lock, and a free word is no slot's.
#[inline(always)]
pub(super) fn add_word(word: &AtomicU64, n: u64, due: impl FnOnce()) {
    // One `add` to memory and a jump on no carry past `due`: LLVM does
    // not fold an atomic load and store into an add to memory when the
    // flags are used, and its three instructions, or a jump on carry
    // to `due` (laid out with a jump back), ran the loop up to half as
    // fast again as the owned `Counter` add (`docs/benchmarks.md`).
    #[cfg(all(target_arch = "x86_64", not(miri), not(shardcount_loom)))]
    {
        // SAFETY: the pointer is the word's, valid and 8-aligned for the
        // borrow. An unlocked `add` to memory is a load and a store of the
        // word, each single-copy atomic on x86-64 for an aligned quadword:
        // the Relaxed load and store of the portable path below, with the
        // calling thread the word's only writer. No stack, and no other
        // memory touched.
        unsafe {
            std::arch::asm!(
                "add qword ptr [{p}], {n}",
                "jnc {done}",
                p = in(reg) word.as_ptr(),
                n = in(reg) n,
                done = label { return; },
                options(nostack),
            );
        }
        due();
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(shardcount_loom))))]
    {
        // Relaxed, both: the only writer reading its own last store; readers
        // order their loads of the word by the slot's `seq`.
        let (b, carry) = word.load(Ordering::Relaxed).overflowing_add(n);
        word.store(b, Ordering::Relaxed);
        if carry {
            due();
        }
    }
}

/// One per-thread slot, padded to its own cache lines.
pub(super) struct Slot {
    /// The hot word while `word` is null: the slot's total plus `bias`
    /// (wrapping), which the owner sets so that it carries out of 64 bits
    /// exactly when an add reaches the window's upper end. The owner's
    /// add is one read-modify-write of the hot word, and its carry is the
    /// whole test.
    biased: AtomicU64,
    /// The hot word's place: null for `biased`, else the arena word of
    /// the slot's thread index at the counter's position
    /// (`thread::arena`), set at the first takeover and kept. Written only
    /// by the owner, with the sequence lock open, so readers read it under
    /// the lock like the word.
    word: AtomicPtr<AtomicU64>,
    /// The hot word minus the total: written only by the owner, while
    /// `seq` is odd.
    bias: AtomicU64,
    /// Even while `bias` and the hot word agree; odd while the owner
    /// rewrites them, and while the slot is free. Readers that see it odd
    /// or moving use `stable`.
    seq: AtomicU64,
    /// Owner-only copies of `word`, `bias` and `seq`, for the owner's own
    /// reads.
    own_word: UnsharedPtr<AtomicU64>,
    own_bias: UnsharedU64,
    own_seq: UnsharedU64,
    /// The total as of the owner's last rewrite, stored before `seq` goes
    /// odd: the total all through the rewrite (or while the slot is free),
    /// as nothing adds to it meanwhile.
    stable: AtomicU64,
    /// The prefix of `total` already moved into the tally.
    folded: AtomicU64,
    /// The slot's generation: bumped when its owner checks, takes or gives
    /// back the slot, and at every orphan add. A fold that sees it move
    /// between its read of `total` and its claim claims again.
    armed: AtomicU64,
    /// Owner-only: the window. The slow path checks when
    /// `total - lo >= width` (wrapping), i.e. once the total has moved `w`
    /// away from where the last check left it, with `width = 2w - 1`; the
    /// hot path tests the upper end only (`hi`).
    lo: UnsharedU64,
    /// Owner-only: see `lo`.
    width: UnsharedU64,
    /// The part of `folded` whose claims have reached the tally: each claim
    /// adds its amount here after its tally add, so `tallied == folded` once no
    /// claim is in flight.
    tallied: AtomicU64,
    /// Owner-only: nanoseconds after `Core::epoch` of the last timed fold.
    last_fold: UnsharedU64,
    /// Owner-only: nanoseconds after `Core::epoch` of the last check that
    /// read the clock.
    last_check: UnsharedU64,
    /// Owner-only: counts between checks, from `MIN_SPAN` to `MAX_SPAN`,
    /// set by `pace`. 32 bits, so that the slot fits in 128 bytes.
    span: UnsharedU32,
    /// Whether a thread owns this slot.
    in_use: AtomicBool,
}

impl Slot {
    fn new(in_use: bool) -> Self {
        Slot {
            // A total of 0 and a headroom of 1: every add is due, so the
            // first one takes the slot over (see `try_bump`).
            biased: AtomicU64::new(u64::MAX),
            word: AtomicPtr::new(ptr::null_mut()),
            own_word: UnsharedPtr::new(ptr::null_mut()),
            bias: AtomicU64::new(u64::MAX),
            seq: AtomicU64::new(0),
            own_bias: UnsharedU64::new(u64::MAX),
            own_seq: UnsharedU64::new(0),
            stable: AtomicU64::new(0),
            folded: AtomicU64::new(0),
            armed: AtomicU64::new(0),
            lo: UnsharedU64::new(0),
            width: UnsharedU64::new(0),
            tallied: AtomicU64::new(0),
            last_fold: UnsharedU64::new(0),
            last_check: UnsharedU64::new(0),
            span: UnsharedU32::new(MIN_SPAN as u32),
            in_use: AtomicBool::new(in_use),
        }
    }

    /// The owner's add, unless a slow check is due: then it changes
    /// nothing and returns `false`, and the caller takes the slow path
    /// (which may first have to take the slot over: a slot not taken over
    /// has a headroom of 1, so every add to it is due, and an add of 0 is
    /// due here too, so that an add that is not due proves the slot taken
    /// over).
    ///
    /// An add of `n` is due when `n` reaches the headroom, `-biased`: when
    /// it would carry. A sub (an add of 2^64 - n) is due unless the
    /// headroom is beyond 2^64 - n, which `arm` never makes it;
    /// `window_passed` tests the window both ways. (`biased` is 0 only
    /// after its owner's add carried to exactly 0, so the carry test
    /// proves ownership as the headroom test did.)
    #[inline]
    pub(super) fn try_bump(&self, n: u64) -> bool {
        let hot = self.hot();
        // Relaxed: the only writer reading its own last store.
        let old = hot.load(Ordering::Relaxed);
        let b = old.wrapping_add(n);
        // One compare for both: the add carried (`b < old`) or was 0.
        if b <= old {
            return false;
        }
        // Relaxed: readers order their loads of this word by `seq` (see
        // `total`); the hot path never moves `seq`.
        hot.store(b, Ordering::Relaxed);
        true
    }

    /// Owner only: the hot word (see `word`).
    #[inline]
    fn hot(&self) -> &AtomicU64 {
        // Relaxed: owner-only.
        let w = self.own_word.load(Ordering::Relaxed);
        // SAFETY: non-null means an arena word, never freed.
        unsafe { w.as_ref() }.unwrap_or(&self.biased)
    }

    /// Whether the slot's hot word is `word`.
    pub(super) fn is_at(&self, word: &AtomicU64) -> bool {
        // Relaxed: owner-only.
        ptr::eq(self.own_word.load(Ordering::Relaxed), word)
    }

    /// Owner only: the slot's total (the owner's own last store, or its
    /// predecessor's, handed over with the index).
    #[inline(always)]
    fn own_total(&self) -> u64 {
        // Relaxed, both: only the owner writes them.
        let b = self.hot().load(Ordering::Relaxed);
        b.wrapping_sub(self.own_bias.load(Ordering::Relaxed))
    }

    /// The slot's total, from any thread: a real value the total had at
    /// some instant during the call, no older than what the calling thread
    /// has already seen of the slot. Wait-free: no loop, whatever the owner
    /// does.
    pub(super) fn total(&self) -> u64 {
        // Acquire: pairs with the owner's Release stores of `seq`: an
        // even value read here makes the `bias` and `biased` stored before
        // it visible, and an odd one the `stable` stored before it.
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 {
            // Relaxed, both: bounded by the Acquire above and, against
            // newer stores, by the fence and the second load of `seq`.
            let bias = self.bias.load(Ordering::Relaxed);
            // Acquire: pairs with the Release store in `attach`, so an
            // arena word read through it is initialised. (It is checked
            // by `seq` like the others.)
            let w = self.word.load(Ordering::Acquire);
            // SAFETY: non-null means an arena word, never freed.
            let b = unsafe { w.as_ref() }
                .unwrap_or(&self.biased)
                .load(Ordering::Relaxed);
            // Acquire fence: if a load above read a store made after
            // `open`'s Release fence, the odd `seq` stored before
            // that fence is visible to the load below.
            fence(Ordering::Acquire);
            // Acquire: as the first load, for `stable` below.
            if self.seq.load(Ordering::Acquire) == s {
                return b.wrapping_sub(bias);
            }
        }
        // The owner is rewriting `bias` and the hot word, or did since `s`,
        // or the slot is free (handed back with the lock open): the owner
        // stored the total in `stable` first, and nothing changes the
        // total while `seq` is odd (a next holder's first add carries
        // through the word, and sets it free again, before it takes the
        // slot over). The Acquire loads of `seq` make the
        // `stable` stored before the value they read visible. Acquire: a
        // newer `stable` is a later total, and reading it makes every
        // store before it visible, so no later read here goes back.
        self.stable.load(Ordering::Acquire)
    }

    /// Owner only, after a due add (already made): whether the total has
    /// left the window, so a check is due. If not (a sub that stayed
    /// inside it), sets the headroom to the window's upper end again.
    pub(super) fn window_passed(&self) -> bool {
        let t = self.own_total();
        let off = t.wrapping_sub(self.lo.load(Ordering::Relaxed));
        let width = self.width.load(Ordering::Relaxed);
        if off >= width {
            return true;
        }
        self.set_headroom(width - off);
        false
    }

    /// The owner's add on the slow path. Returns whether a check is due.
    /// Only an add that carries (reaches the headroom) looks at the window,
    /// so an add right after the check that takes the slot over leaves the
    /// headroom as that check set it.
    pub(super) fn bump(&self, n: u64) -> bool {
        let hot = self.hot();
        let (b, carry) = hot.load(Ordering::Relaxed).overflowing_add(n);
        // Relaxed: as in `try_bump`.
        hot.store(b, Ordering::Relaxed);
        carry && self.window_passed()
    }

    /// Owner only: sets `bias` and the hot word so that an add carries
    /// exactly when it brings the total `h` (at least 1) or more above
    /// what it is now. Rare (at a check, at most every `MIN_SPAN` counts),
    /// so it may take a few stores to keep readers exact.
    pub(super) fn set_headroom(&self, h: u64) {
        self.open();
        self.store_headroom(h);
        self.close();
    }

    /// Owner only, at the takeover: a headroom of 1, the hot word moved to
    /// `word` (the thread's free arena word at the counter's position) if
    /// it is not there yet, and the sequence lock closed (a free slot's is
    /// left open: `hand_back`).
    pub(super) fn attach(&self, word: Option<&'static AtomicU64>) {
        // Relaxed: owner-only.
        if self.own_seq.load(Ordering::Relaxed) & 1 == 0 {
            self.open();
        }
        if let Some(word) = word {
            debug_assert_eq!(word.load(Ordering::Relaxed), crate::thread::arena::FREE);
            // Relaxed: owner-only.
            if self.own_word.load(Ordering::Relaxed).is_null() {
                let p = ptr::from_ref(word).cast_mut();
                // Release: pairs with readers' Acquire load, so the word's
                // initial state is visible through the pointer. Inside the
                // open lock, so a reader that reads it sees `seq` move.
                self.word.store(p, Ordering::Release);
                self.own_word.store(p, Ordering::Relaxed);
            }
        }
        self.store_headroom(1);
        self.close();
    }

    /// Owner only, when it hands the slot back: a headroom of 1, which sets
    /// an arena word free (`u64::MAX`), and the sequence lock left open, so
    /// readers read the total from `stable` while the next holder's first
    /// add carries through the word (and sets it free again) before it
    /// takes the slot over. The slot keeps its word: it is the same for
    /// every holder of the index, as long as the counter lives.
    fn hand_back(&self) {
        self.open();
        self.store_headroom(1);
    }

    /// Owner only: opens the sequence lock (`seq` odd), with the total in
    /// `stable` for readers meanwhile.
    fn open(&self) {
        let t = self.own_total();
        // Relaxed: owner-only.
        let s = self.own_seq.load(Ordering::Relaxed).wrapping_add(1);
        debug_assert!(s & 1 == 1, "the lock is open already");
        self.own_seq.store(s, Ordering::Relaxed);
        // Release: a reader whose Acquire load reads this value sees every
        // store made before it, so its later reads of the slot return this
        // total or a newer one (the exact path could otherwise return a
        // total older than a `stable` it read from the future).
        self.stable.store(t, Ordering::Release);
        // Release: a reader whose Acquire load reads this odd value sees
        // `stable` above.
        self.seq.store(s, Ordering::Release);
        // Release fence: a reader whose loads of `bias`, `word` or the hot
        // word read a store after it (or a later add), followed by its
        // Acquire fence, sees the odd `seq` above and falls back to
        // `stable`.
        fence(Ordering::Release);
    }

    /// Owner only, with the lock open: sets `bias` and the hot word for a
    /// headroom of `h`, keeping the total.
    fn store_headroom(&self, h: u64) {
        debug_assert!(h >= 1, "a headroom of 0 would never carry");
        let t = self.own_total();
        let b = h.wrapping_neg();
        // Relaxed, all: ordered by `open`'s fence and `close`'s store.
        self.bias.store(b.wrapping_sub(t), Ordering::Relaxed);
        self.own_bias.store(b.wrapping_sub(t), Ordering::Relaxed);
        self.hot().store(b, Ordering::Relaxed);
    }

    /// Owner only: closes the sequence lock (`seq` even).
    fn close(&self) {
        // Relaxed: owner-only.
        let s = self.own_seq.load(Ordering::Relaxed).wrapping_add(1);
        self.own_seq.store(s, Ordering::Relaxed);
        // Release: pairs with readers' Acquire loads, as `open`'s store.
        self.seq.store(s, Ordering::Release);
    }

    /// Owner only: starts a new generation and returns the unfolded distance
    /// `|total - folded|` as of then. Every claim of the slot is either in
    /// that distance or, if it lands later, sees the new generation.
    pub(super) fn begin_generation(&self) -> u64 {
        // Relaxed: only the owner writes `armed`; a new owner sees its
        // predecessor's last store through the index pool's mutex.
        let g = self.armed.load(Ordering::Relaxed);
        // Release: pairs with the Acquire loads of `armed` in
        // `Core::fold`: a fold that reads this generation reads a total
        // no older than the owner's last store before it.
        self.armed.store(g.wrapping_add(1), Ordering::Release);
        let f = self.folded_after_bump();
        let t = self.own_total();
        (t.wrapping_sub(f) as i64).unsigned_abs()
    }

    /// Reads `folded` after a bump of `armed`, by a read-modify-write.
    fn folded_after_bump(&self) -> u64 {
        // Release, and an RMW rather than a load: a claim later in
        // `folded`'s order reads from its release sequence, so it
        // synchronises with it and then sees the bump; an earlier claim is
        // in the value read. A load could miss a claim that misses the bump
        // too (store buffering), leaving a stale claim unnoticed.
        self.folded.fetch_add(0, Ordering::Release)
    }

    /// Owner only: sets the window so the next slow check comes after at most
    /// `span` counts, and before the unfolded distance `u` (from
    /// `begin_generation`, 0 after a fold) can reach `batch`.
    ///
    /// The window is also at most half a batch wide: a fold by another
    /// thread (`flush_all`, a `Folder`) can set `folded` to any total inside
    /// the window, and with subs the total can then swing to the far side of
    /// it before the next check; two half-widths stay below `batch`. (A
    /// claim of a total from before the window is claimed again: see
    /// `Core::fold`.)
    fn arm(&self, u: u64, batch: u64) {
        debug_assert!(u < batch, "the check folds at a distance of a batch");
        let span = u64::from(self.span.load(Ordering::Relaxed));
        let w = (batch - u).min(batch.div_ceil(2)).min(span);
        let t = self.own_total();
        self.lo.store(t.wrapping_sub(w - 1), Ordering::Relaxed);
        self.width.store(2 * w - 1, Ordering::Relaxed);
        // The window's upper end, `t + w`: the carry needs no care for
        // the total's own wrap.
        self.set_headroom(w);
    }

    /// Owner only, at a check that read the clock (`now`): whether a timed
    /// fold is due, and the span to the next check. The span doubles while
    /// checks come less than a quarter of `interval` apart and halves while
    /// they come more than one apart, so a thread that adds steadily checks
    /// one to four times per interval (a timed fold comes one to two
    /// intervals after the last), at any rate up to `MAX_SPAN` counts per
    /// check.
    fn pace(&self, now: u64, interval: u64) -> bool {
        let gap = now.saturating_sub(self.last_check.load(Ordering::Relaxed));
        self.last_check.store(now, Ordering::Relaxed);
        let span = u64::from(self.span.load(Ordering::Relaxed));
        let span = if gap < interval / 4 {
            (span * 2).min(MAX_SPAN)
        } else if gap > interval {
            (span / 2).max(MIN_SPAN)
        } else {
            span
        };
        self.span.store(span as u32, Ordering::Relaxed);
        let due = now.saturating_sub(self.last_fold.load(Ordering::Relaxed)) >= interval;
        if due {
            self.last_fold.store(now, Ordering::Relaxed);
        }
        due
    }
}

/// What a counter shares with the threads that use it; reference-counted so
/// a thread's exit registry can outlive the counter.
pub(super) struct Core {
    pub(super) tally: CachePadded<AtomicU64>,
    /// One slot per thread index.
    pub(super) slots: SlotTable<CachePadded<Slot>>,
    orphan: CachePadded<Slot>,
    /// Set when the counter is dropped, so exit registries and folders let
    /// go early.
    pub(super) dropped: AtomicBool,
    /// Origin of the owner-only `last_fold` timestamps, on `clock::nanos`.
    epoch: u64,
    /// The counter's position in every thread's arena: its slots' hot
    /// words. Given back after `drop` frees them.
    pub(super) position: Position,
}

impl Drop for Core {
    fn drop(&mut self) {
        // Every thread that took a slot over handed it back (its exit
        // registry calls `thread_exit`, at its exit or when it prunes a
        // dropped counter, before letting go of the block), setting its
        // arena word free: the next counter at this position finds every
        // word free.
        #[cfg(debug_assertions)]
        self.for_each_thread_slot(|s| {
            // Relaxed: `&mut self`: every store happened-before.
            let w = s.word.load(Ordering::Relaxed);
            // SAFETY: non-null means an arena word, never freed.
            if let Some(w) = unsafe { w.as_ref() } {
                let free = w.load(Ordering::Relaxed) == crate::thread::arena::FREE;
                debug_assert!(free, "an arena word not handed back");
            }
        });
    }
}

impl Default for Slot {
    fn default() -> Self {
        Slot::new(false)
    }
}

impl Core {
    pub(super) fn new(initial: u64) -> Self {
        let orphan = Slot::new(true);
        // Relaxed, all: not shared yet; the AcqRel exchange in
        // `RoughCounter::install` publishes them. The orphan's bias stays 0
        // (every thread adds to it with a locked add, and it is never armed),
        // so `biased` is its total.
        orphan.biased.store(initial, Ordering::Relaxed);
        orphan.bias.store(0, Ordering::Relaxed);
        orphan.own_bias.store(0, Ordering::Relaxed);
        orphan.folded.store(initial, Ordering::Relaxed);
        // The initial claim is in the tally already: none in flight, or
        // `fold_and_wait` would wait for it for ever.
        orphan.tallied.store(initial, Ordering::Relaxed);
        Core {
            tally: CachePadded::new(AtomicU64::new(initial)),
            slots: SlotTable::new(),
            orphan: CachePadded::new(orphan),
            dropped: AtomicBool::new(false),
            epoch: super::clock::nanos(),
            position: Position::take(),
        }
    }

    pub(super) fn now(&self) -> u64 {
        super::clock::nanos().wrapping_sub(self.epoch)
    }

    /// Moves `slot`'s unfolded delta into the tally. Any thread may call it,
    /// at any time, concurrently with the owner's adds and other folds.
    ///
    /// If the slot's generation moved between our read of `total` and our
    /// claim, the owner checked in between and may have armed its window
    /// around a newer total, reading `folded` from before our claim: we claim
    /// again, from the total we installed, until a claim sees no new
    /// generation. Each extra round needs another bump: a check by the owner
    /// (at least one count), a takeover or give-back, or an orphan add.
    pub(super) fn fold(&self, slot: &Slot) {
        // Acquire: pairs with the Release bumps (`Slot::begin_generation`,
        // `add_orphan`), so the total read below is no older than the one
        // the bumping thread stored before it.
        let mut seen = slot.armed.load(Ordering::Acquire);
        // Acquire: pairs with the AcqRel claim of the previous fold, so the
        // total read below is no older than the one that fold claimed.
        let mut f = slot.folded.load(Ordering::Acquire);
        loop {
            // No older than the Acquire above allows (see `Slot::total`);
            // the Release on the tally publishes this read to `approx`
            // readers.
            let t = self.total_of(slot);
            if t == f {
                return;
            }
            // AcqRel: Release so the next fold's Acquire load of `folded`
            // happens-after our read of `total`; Acquire as the load above
            // when we retry, and so that a claim after a bump's RMW on
            // `folded` synchronises with it (see below).
            match slot
                .folded
                .compare_exchange(f, t, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    // Release: pairs with the Acquire load in
                    // `RoughCounter::approx`: an `approx` that sees this add
                    // happens-after our read of `total`, so a following `sum`
                    // reads at least that total (approx ≤ sum for add-only
                    // use).
                    self.tally.fetch_add(t.wrapping_sub(f), Ordering::Release);
                    // Release: pairs with the Acquire loads of `tallied` in
                    // `fold_and_wait`: a waiter that reads this (or a later)
                    // value sees our tally add.
                    slot.tallied.fetch_add(t.wrapping_sub(f), Ordering::Release);
                    // Acquire: pairs with the Release bumps, for the next
                    // round's total. If our claim came after a bump's RMW
                    // on `folded`, it synchronised with it, so this sees
                    // the bump.
                    let now = slot.armed.load(Ordering::Acquire);
                    if now == seen {
                        return;
                    }
                    seen = now;
                    f = t;
                }
                Err(now) => f = now,
            }
        }
    }

    /// `slot`'s total. The orphan is never rewritten (its `bias` stays 0),
    /// so its `biased` is its total, one load (a third of `Slot::total`'s
    /// atomic operations, which the loom models pay for on every read).
    fn total_of(&self, slot: &Slot) -> u64 {
        if std::ptr::eq(slot, &*self.orphan) {
            // Relaxed: every write is an RMW; coherence bounds its age, as
            // the Acquire loads before each call do.
            slot.biased.load(Ordering::Relaxed)
        } else {
            slot.total()
        }
    }

    /// Calls `f` on every thread slot (not the orphan).
    fn for_each_thread_slot(&self, mut f: impl FnMut(&Slot)) {
        self.slots.for_each(|s| f(s));
    }

    /// Calls `f` on every slot, then on the orphan slot.
    fn for_each_slot(&self, mut f: impl FnMut(&Slot)) {
        self.for_each_thread_slot(&mut f);
        f(&self.orphan);
    }

    pub(super) fn fold_all(&self) {
        self.for_each_slot(|s| self.fold_and_wait(s));
    }

    /// Folds `slot`, then waits until every claim of it so far, this one's
    /// and any other thread's in flight, has reached the tally, unless the
    /// slot's owner claims more meanwhile (it is adding: nothing to be
    /// exact about). Without the wait, a fold that finds everything claimed
    /// returns while another thread's claim is still on its way to the tally
    /// (an exit fold after `thread::scope`, a `Folder` pass).
    pub(super) fn fold_and_wait(&self, slot: &Slot) {
        self.fold(slot);
        // Acquire: pairs with the claims' AcqRel exchanges of `folded`;
        // every claim up to this value is one we may wait for.
        let target = slot.folded.load(Ordering::Acquire);
        #[cfg(not(shardcount_loom))]
        let mut spins = 0u32;
        // Acquire: pairs with each claim's Release add to `tallied`, made after
        // its tally add; every write of `tallied` is an RMW, so reading the
        // final value synchronises with all of them.
        while slot.tallied.load(Ordering::Acquire) != target {
            // Relaxed: only whether a claim beyond `target` was made.
            if slot.folded.load(Ordering::Relaxed) != target {
                return;
            }
            // The claimant is a few instructions from done, unless it was
            // descheduled: then give it the core.
            crate::primitive::hint::spin_loop();
            #[cfg(not(shardcount_loom))]
            {
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
    }

    pub(super) fn sum(&self) -> u64 {
        let mut total = 0u64;
        // Each slot's total includes every add that happened-before this
        // call (see the module docs and `Slot::total`).
        self.for_each_slot(|s| total = total.wrapping_add(self.total_of(s)));
        total
    }

    /// Owner only: whether the calling thread has taken `slot` over.
    #[inline]
    pub(super) fn owns(slot: &Slot) -> bool {
        slot.in_use.load(Ordering::Relaxed)
    }

    /// The calling thread's first add to `slot` (the one at its index):
    /// takes it over. Returns `false` if the thread is exiting and cannot
    /// promise to hand the slot back, in which case nothing changed.
    /// `shared` is a strong reference for the thread's exit registry.
    pub(super) fn take_over(shared: Arc<Self>, slot: &Slot, index: usize) -> bool {
        let now = shared.now();
        if !crate::thread::slots::on_exit(Box::new(Exit { shared, index })) {
            return false;
        }
        slot.in_use.store(true, Ordering::Relaxed);
        slot.last_fold.store(now, Ordering::Relaxed);
        slot.last_check.store(now, Ordering::Relaxed);
        slot.span.store(MIN_SPAN as u32, Ordering::Relaxed);
        true
    }

    /// Folds the slot and marks it free, for the next thread to hold its index.
    fn release_slot(&self, slot: &Slot) {
        // A new generation first: a claim of an older total that lands after
        // our fold is then claimed again, so the free slot ends fully folded.
        slot.begin_generation();
        self.fold_and_wait(slot);
        // An empty window: the next holder's first add takes the slot over.
        slot.width.store(0, Ordering::Relaxed);
        slot.hand_back();
        // Release: pairs with `live_slots`'s Acquire, so a slot read as free
        // has its exit fold visible.
        slot.in_use.store(false, Ordering::Release);
    }

    /// An add with no slot to go to: count it on the shared orphan slot, with
    /// a locked add, and fold it at once.
    #[cold]
    pub(super) fn add_orphan(&self, n: u64) {
        // Relaxed: one RMW; `fold` reads it back in program order, and the
        // Release bump below publishes it to other folds.
        self.orphan.biased.fetch_add(n, Ordering::Relaxed);
        // Release: pairs with the Acquire loads of `armed` in `fold`, as an
        // owner's bump does; an RMW since every thread may bump the
        // orphan's generation.
        self.orphan.armed.fetch_add(1, Ordering::Release);
        // Every other add's claim is then either folded over by our fold or
        // claimed again by its own, so the orphan ends fully folded.
        self.orphan.folded_after_bump();
        self.fold(&self.orphan);
    }

    /// Owner only: the slow check of `slot`. Starts a new generation, folds
    /// if the unfolded distance reached `batch` or `interval` (nanoseconds;
    /// `u64::MAX`, never) has passed since the slot's last timed fold, sets
    /// the span (`Slot::pace`), and arms the window for the next check.
    /// `interval` is `None` at the check that takes the slot over: no clock,
    /// no timed fold.
    pub(super) fn check(&self, slot: &Slot, batch: u64, interval: Option<u64>) {
        let mut u = slot.begin_generation();
        let timed = match interval {
            None => false,
            Some(u64::MAX) => {
                // Never timed: no clock, and the widest span.
                slot.span.store(MAX_SPAN as u32, Ordering::Relaxed);
                false
            }
            Some(interval) => slot.pace(self.now(), interval),
        };
        if u >= batch || timed {
            self.fold(slot);
            u = 0;
        }
        slot.arm(u, batch);
    }

    /// How many slots have ever been taken over: one per thread index that
    /// used the counter.
    pub(super) fn slots(&self) -> usize {
        let mut n = 0;
        // Relaxed: a diagnostic; `armed` moves at every takeover.
        self.for_each_thread_slot(|s| n += usize::from(s.armed.load(Ordering::Relaxed) != 0));
        n
    }

    pub(super) fn live_slots(&self) -> usize {
        let mut n = 0;
        self.for_each_thread_slot(|s| {
            // Acquire: pairs with the Release in `release_slot`, so once a
            // slot reads as free, the fold that preceded its release is
            // visible (to `approx` too).
            n += usize::from(s.in_use.load(Ordering::Acquire));
        });
        n
    }
}

/// A thread's promise to hand its slot in one counter back at exit.
struct Exit {
    shared: Arc<Core>,
    index: usize,
}

impl ThreadExit for Exit {
    fn thread_exit(&self, index: usize) {
        debug_assert_eq!(index, self.index);
        if let Some(slot) = self.shared.slots.get(self.index) {
            if Core::owns(slot) {
                self.shared.release_slot(slot);
            }
        }
    }

    fn is_dropped(&self) -> bool {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}
