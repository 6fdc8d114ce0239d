//! Grace periods for the shard tables' slow paths and reads: a merge
//! frees a retired table only after every thread that may have loaded its
//! address in a *pinned* section has left that section.
//!
//! Owners' hot adds are not pinned (they would pay a locked instruction
//! per add); the owner ids' revocation covers them (`owner.rs`). Pinned
//! are the reads (sums, takes, snapshots), and adds by threads without an
//! owner id (from thread-local destructors, after the lease is gone).
//!
//! # Protocol
//!
//! A pinned section marks a word, then loads heads; a grace period
//! ([`wait`]), run after the table was unlinked, makes sure every section
//! that marked its word before can be seen, then waits for each of them to
//! end.
//!
//! **Per-thread words** (the usual path). Each thread has a word of its
//! own (`MINE`, registered in `WORDS` at the thread's first pin, removed
//! at its exit), written only by that thread: the section's depth in the
//! low bits and, above them, an epoch that the outermost `pin` moves on
//! (wrapping: a repeated epoch only makes a grace period wait longer). A
//! destructor-free thread-local (`FAST`) points at it where the light
//! barrier is free, so a pin there costs a bare TLS load, a test and the
//! word's load and store.
//! Entering stores the new value (`Release`: a grace period that sees a
//! later section's mark must also learn that the earlier section ended),
//! then issues a *light* barrier; leaving stores the lower depth
//! (`Release`). The light barrier
//! is one half of an asymmetric pair:
//!
//! * on Linux, where `membarrier(PRIVATE_EXPEDITED)` is available, it is a
//!   compiler fence only, and [`wait`]'s *heavy* barrier is that system
//!   call, which runs a full barrier on every CPU running a thread of the
//!   process (acting on the reader as a signal handler's fence would:
//!   outside Rust's formal model, the practice of liburcu and folly);
//! * elsewhere (and under loom and miri) both halves are `SeqCst` fences.
//!
//! Why that suffices: take a section S and the grace period G, which
//! unlinked the table and then ran the heavy barrier. If S's mark is
//! ordered before G's barrier, G's load of S's word (after the barrier)
//! sees it (or a later value), and G waits until the word shows S ended
//! (`Acquire`, pairing with the `Release` store): everything S did
//! happens-before G returns. Otherwise S's mark, and so its head loads
//! after its light barrier, come after G's barrier, which made the unlink
//! visible: S never reaches the table. The epoch lets G tell "S ended and
//! another section began" from "S is still running", so a thread that
//! pins again and again cannot hold G up. A thread that registers after G
//! read `WORDS` takes the lock after G's unlink, so its sections see it.
//!
//! **Striped counters** (threads whose thread-locals are gone: a pin from
//! a thread-local destructor). Two phases: such a section adds one to
//! `READERS[p][stripe]`, where `p` is the phase it read, then issues a
//! `SeqCst` fence, then loads heads; leaving, it subtracts one
//! (`Release`). G
//! issues a `SeqCst` fence, then waits for every counter of both phases to
//! read 0 at some moment (`Acquire`), flipping the phase between the two
//! so that new sections go to the phase not being waited on. If S's fence
//! comes before G's in the fences' total order, G's loads see S's
//! increment, and a later 0 means S's decrement came first; otherwise S's
//! loads see the unlink that came before G's fence.
//!
//! Orderings not named above: the `phase` is `Relaxed` everywhere, as it
//! only steers new sections away from the counters being waited on (G
//! waits on both phases, so any value is safe); the barrier's flags
//! (`HEAVY`, `TRIED`) are `Relaxed`, as they are written once under the
//! `WORDS` lock, and read under it or by a thread that took it before its
//! first light barrier (registering its word, or [`prepare_barrier`]).

use crate::primitive::hint::spin_loop;
use crate::primitive::sync::atomic::{compiler_fence, fence, AtomicUsize, Ordering};
use crate::primitive::sync::{lock, Arc, Mutex};
use crossbeam_utils::CachePadded;
use std::cell::{Cell, OnceCell};

crate::primitive::global! {
    /// One grace period at a time: two waits flipping the phase together
    /// could each flip it twice and never wait on the other phase.
    static WAITS: Mutex<()> = Mutex::new(());
}

/// Counters per phase (a power of two): threads spread over them so that
/// pinned reads on different threads do not share a line.
#[cfg(not(shardcount_loom))]
const STRIPES: usize = 16;
/// One per phase keeps the models' state space small.
#[cfg(shardcount_loom)]
const STRIPES: usize = 1;

/// Pinned sections per phase and stripe, and the phase.
struct Readers {
    phase: AtomicUsize,
    count: [[CachePadded<AtomicUsize>; STRIPES]; 2],
}

// A plain static on std: a pin reads no lazy-initialisation state.
#[cfg(not(shardcount_loom))]
static READERS: Readers = Readers {
    phase: AtomicUsize::new(0),
    count: [const { [const { CachePadded::new(AtomicUsize::new(0)) }; STRIPES] }; 2],
};

// Loom's atomics are made inside a model.
#[cfg(shardcount_loom)]
crate::primitive::global! {
    static READERS: Readers = Readers {
        phase: AtomicUsize::new(0),
        count: std::array::from_fn(|_| std::array::from_fn(|_| CachePadded::new(AtomicUsize::new(0)))),
    };
}

/// A thread's word: section depth below `EPOCH_ONE`, epoch above.
type Word = CachePadded<AtomicUsize>;

/// One outermost section on a word.
const EPOCH_ONE: usize = 1 << 16;

/// The words of the live threads that ever pinned.
type Words = Mutex<Vec<Arc<Word>>>;

crate::primitive::global! {
    // Behind an Arc that each thread's `Mine` shares, so that leaving it
    // never needs the static: under loom, statics are gone before the main
    // thread's thread-local destructors run.
    static WORDS: Arc<Words> = Arc::new(Mutex::new(Vec::new()));
}

/// This thread's word, registered at its first pin, and the registry.
/// Its drop unregisters the word, after it emptied `FAST`.
struct Mine {
    reg: OnceCell<(Arc<Word>, Arc<Words>)>,
}

impl Mine {
    /// The word, registering it (and filling `FAST`) the first time.
    #[cold]
    fn word(&self) -> *const AtomicUsize {
        let (w, _) = self.reg.get_or_init(|| {
            let w = Arc::new(CachePadded::new(AtomicUsize::new(0)));
            let words: Arc<Words> = Arc::clone(&WORDS);
            let mut all = lock(&words);
            barrier::register();
            all.push(w.clone());
            drop(all);
            (w, words)
        });
        let w: *const AtomicUsize = &***w;
        // Only where the light barrier is a compiler fence: `pin`'s fast
        // path issues no other (elsewhere every pin comes here and fences).
        if barrier::is_heavy() {
            let _ = FAST.try_with(|f| f.set(w));
        }
        w
    }
}

impl Drop for Mine {
    fn drop(&mut self) {
        if let Some((w, words)) = self.reg.get() {
            // First no pin finds the word, then it may be freed.
            let _ = FAST.try_with(|f| f.set(std::ptr::null()));
            lock(words).retain(|x| !Arc::ptr_eq(x, w));
        }
    }
}

crate::primitive::const_thread_local! {
    static MINE: Mine = Mine { reg: OnceCell::new() };
}

// This thread's registered word (null before the first pin, after
// `MINE`'s drop, and where the light barrier is a fence), which only this
// thread writes. No destructor: a pin
// reads it with a bare TLS load, as the owned add reads `OWNER`.
#[cfg(not(shardcount_loom))]
std::thread_local! {
    static FAST: Cell<*const AtomicUsize> = const { Cell::new(std::ptr::null()) };
}

// Loom may drop it before `MINE`: a leaked cell stays readable.
#[cfg(shardcount_loom)]
loom::thread_local! {
    static FAST: &'static Cell<*const AtomicUsize> = Box::leak(Box::new(Cell::new(std::ptr::null())));
}

crate::primitive::const_thread_local! {
    /// How many striped sections this thread is inside. No destructor, so
    /// it outlives `MINE` (std keeps such a thread-local readable while
    /// other destructors run): [`assert_outside`] learns from it that a
    /// thread whose word is gone is inside a section.
    static STRIPED: Cell<usize> = Cell::new(0);
}

/// A pinned section: tables reached from heads loaded while it lives are
/// not freed before it ends. Dropped on the thread that made it.
#[must_use = "the section ends when the pin is dropped"]
pub(crate) struct Pin {
    /// This thread's word (alive while the thread's `MINE` is, which
    /// outlives every section the thread runs), or a striped counter.
    word: *const AtomicUsize,
    striped: bool,
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pin")
    }
}

/// Starts a pinned section. Load heads only after this returns.
#[inline(always)]
pub(crate) fn pin() -> Pin {
    // Under loom `f` is a `&&Cell`, which the call derefs.
    let w = FAST.try_with(|f| f.get()).unwrap_or(std::ptr::null());
    if w.is_null() {
        return pin_slow();
    }
    // SAFETY: `FAST` names this thread's registered word, which its
    // `MINE` keeps alive until the drop that empties `FAST` first.
    let pin = unsafe { mark(w) };
    // The light barrier: `FAST` is set only where it is this (`Mine`).
    compiler_fence(Ordering::SeqCst);
    pin
}

/// `pin` before the thread's first (which registers its word) and after
/// its word is gone (a thread-local destructor's: striped).
#[cold]
#[inline(never)]
fn pin_slow() -> Pin {
    // Registering the word allocates: a pin from inside that allocation
    // (a global allocator counting with a sharded counter) takes a stripe.
    let Some(_inside) = super::reentry::enter() else {
        return striped();
    };
    match MINE.try_with(Mine::word) {
        Ok(w) => {
            // SAFETY: the word `MINE` holds, alive while it is.
            let pin = unsafe { mark(w) };
            barrier::light();
            pin
        }
        Err(_) => striped(),
    }
}

/// Marks word `w`, this thread's, for a new (or nested) section.
///
/// # Safety
///
/// `w` is the calling thread's registered word, alive while the thread's
/// `MINE` is.
#[inline(always)]
unsafe fn mark(w: *const AtomicUsize) -> Pin {
    // SAFETY: the caller's promise.
    let word = unsafe { &*w };
    // Relaxed: only this thread writes the word.
    let v = word.load(Ordering::Relaxed);
    let outermost = v % EPOCH_ONE == 0;
    debug_assert!(v % EPOCH_ONE < EPOCH_ONE - 1, "pins nested too deep");
    let v = v.wrapping_add(1 + if outermost { EPOCH_ONE } else { 0 });
    // Release: pairs with `wait`'s Acquire loads, which may see this mark
    // (a new epoch) instead of the unpin before it, and must still learn
    // that the section before ended (a plain store would not carry the
    // unpin's Release); the caller's light barrier orders the store
    // before the head loads.
    word.store(v, Ordering::Release);
    Pin {
        word: w,
        striped: false,
    }
}

/// `pin` for a thread whose thread-locals are gone.
#[cold]
fn striped() -> Pin {
    let readers: &'static Readers = &READERS;
    let p = readers.phase.load(Ordering::Relaxed) & 1;
    // The token is an address: its high bits tell threads apart.
    let stripe = super::probe::token().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - 4);
    let count = &*readers.count[p][stripe & (STRIPES - 1)];
    // Relaxed, then the fence: the fence orders the increment before the
    // head loads that follow (module docs).
    count.fetch_add(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    // Loom's thread-locals can be gone here; std's destructor-free one is not.
    let _ = STRIPED.try_with(|d| d.set(d.get() + 1));
    Pin {
        word: count,
        striped: true,
    }
}

impl Drop for Pin {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: `word` is a striped counter (a static) or this thread's
        // word, kept alive by its `MINE` until the thread's thread-locals
        // are dropped; a pin is dropped on the thread that made it, in the
        // scope that made it, before then.
        let w = unsafe { &*self.word };
        if self.striped {
            unstripe(w);
        } else {
            // Relaxed load: only this thread writes the word. Release
            // store: pairs with `wait`'s Acquire loads of the words: the
            // section's reads of a table happen-before the grace period
            // that sees this, and so before a free.
            w.store(w.load(Ordering::Relaxed).wrapping_sub(1), Ordering::Release);
        }
    }
}

/// Ends a striped section.
#[cold]
fn unstripe(count: &AtomicUsize) {
    // Release: pairs with `wait`'s Acquire loads of the counters.
    count.fetch_sub(1, Ordering::Release);
    let _ = STRIPED.try_with(|d| d.set(d.get().saturating_sub(1)));
}

/// The two halves of the asymmetric barrier (module docs).
#[cfg(all(target_os = "linux", not(shardcount_loom), not(miri)))]
mod barrier {
    use crate::primitive::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};

    /// `membarrier` commands (linux/membarrier.h).
    const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// Whether the process registered for expedited barriers: set once,
    /// under the `WORDS` lock, before any thread's first section.
    static HEAVY: AtomicBool = AtomicBool::new(false);
    static TRIED: AtomicBool = AtomicBool::new(false);

    /// Registers the process, once (under the `WORDS` lock).
    pub(super) fn register() {
        if !TRIED.swap(true, Ordering::Relaxed) {
            // SAFETY: `membarrier` takes integers and touches no memory
            // of ours; an unknown command only fails.
            let r =
                unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_PRIVATE_EXPEDITED, 0, 0) };
            HEAVY.store(r == 0, Ordering::Relaxed);
        }
    }

    /// After marking a word, before loading heads.
    #[inline(always)]
    pub(super) fn light() {
        if HEAVY.load(Ordering::Relaxed) {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// Whether sections use the light barrier; read under the `WORDS`
    /// lock (Relaxed: set under it).
    pub(super) fn is_heavy() -> bool {
        HEAVY.load(Ordering::Relaxed)
    }

    /// After unlinking, before reading the words' values.
    pub(super) fn heavy(heavy: bool) {
        fence(Ordering::SeqCst);
        if heavy {
            // Readers already rely on it, so there is no falling back to
            // fences: retry a failure that may pass (`ENOMEM`), then say
            // so (a seccomp filter installed after the first pin would).
            for _ in 0..1000 {
                // SAFETY: as in `register`.
                if unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED, 0, 0) } == 0 {
                    return;
                }
                std::thread::yield_now();
            }
            panic!("shardcount: membarrier(PRIVATE_EXPEDITED) keeps failing after the process registered for it (a seccomp filter installed since?)");
        }
    }
}

/// Without `membarrier`: a fence on both sides.
#[cfg(not(all(target_os = "linux", not(shardcount_loom), not(miri))))]
mod barrier {
    use crate::primitive::sync::atomic::{fence, Ordering};

    pub(super) fn register() {}

    pub(super) fn is_heavy() -> bool {
        false
    }

    #[inline(always)]
    pub(super) fn light() {
        fence(Ordering::SeqCst);
    }

    pub(super) fn heavy(_: bool) {
        fence(Ordering::SeqCst);
    }
}

/// Registers the process for the light barrier if it can be, once: before
/// a thread's first use of [`light_barrier`] outside a pinned section
/// (the owner ids' row cache, `owner.rs`).
pub(crate) fn prepare_barrier() {
    let _all = lock(&*WORDS);
    barrier::register();
}

/// Whether the heavy barrier is `membarrier`, so that the light one is a
/// compiler fence (registering the process for it if it can be, once):
/// readers' windows (`owner.rs`, "Readers") rely on that and exist only
/// where it holds.
pub(crate) fn light_is_free() -> bool {
    // The answer, once known (0: not yet, 1: yes, 2: no). A std atomic
    // under loom too: a fixed fact cached, not a protocol to model; any
    // value read but 0 is final (Relaxed).
    static FREE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    match FREE.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            let free = {
                let _all = lock(&*WORDS);
                barrier::register();
                barrier::is_heavy()
            };
            FREE.store(
                if free { 1 } else { 2 },
                std::sync::atomic::Ordering::Relaxed,
            );
            free
        }
        known => known == 1,
    }
}

/// The light half of the asymmetric barrier (module docs), for another
/// protocol of the same shape: store, barrier, load on one side, against
/// [`heavy_barrier`] on the other (`owner.rs`'s row cache). The caller ran
/// [`prepare_barrier`] before.
#[inline]
pub(crate) fn light_barrier() {
    barrier::light();
}

/// The heavy half: after it, every store a thread made before its light
/// barrier is visible, or that thread's loads after it see this thread's
/// stores before this call.
pub(crate) fn heavy_barrier() {
    let heavy = {
        let _all = lock(&*WORDS);
        barrier::register();
        barrier::is_heavy()
    };
    barrier::heavy(heavy);
}

/// Whether this thread is inside a pinned section: user code run inside
/// one (a key's `Eq`), also on a thread whose word is gone (a thread-local
/// destructor's), whose sections are striped.
pub(crate) fn inside() -> bool {
    // The word through `MINE`, not `FAST`: `FAST` is empty where the
    // light barrier is a fence, and sections there mark the word too.
    MINE.try_with(|m| {
        m.reg
            .get()
            .is_some_and(|(w, _)| w.load(Ordering::Relaxed) % EPOCH_ONE != 0)
    })
    .unwrap_or(false)
        || STRIPED.try_with(|d| d.get() != 0).unwrap_or(false)
}

/// Panics if this thread is inside a pinned section, where a grace
/// period would wait for itself for ever: call it before changing
/// anything that a grace period must follow, so that the panic leaves
/// nothing half done.
#[track_caller]
pub(crate) fn assert_outside() {
    assert!(
        !inside(),
        "shardcount: a grace period (a map's removal, a merge, a map's table growth) was started inside a pinned section, where it would wait for itself: from a key's `Hash`, `Eq` or `Borrow` impl?"
    );
}

/// Waits until every section pinned before this call has ended. Call it
/// after unlinking a table (no new section can reach it), before freeing,
/// and never from inside a pinned section (it panics: [`assert_outside`]),
/// nor holding a lock that a pinned section may wait for.
pub(crate) fn wait() {
    assert_outside();
    // Inside for the whole wait (`reentry`), dropped last: the clone
    // below allocates under the lock a lease takes, and freeing it (under
    // `WAITS`) may call a global allocator whose add must not wait here
    // again, as a map's insert would.
    let _inside = super::reentry::enter();
    let _one = lock(&WAITS);
    // The words to wait on. A thread that registers after this read
    // takes the lock after this thread's unlink, so its sections see it.
    let (words, heavy) = {
        let all = lock(&*WORDS);
        (all.clone(), barrier::is_heavy())
    };
    barrier::heavy(heavy);
    for w in &words {
        // Acquire: pairs with the Release stores in `pin` and `Pin::drop`.
        let v = w.load(Ordering::Acquire);
        if v % EPOCH_ONE == 0 {
            continue;
        }
        // Inside a section: wait until it ended (depth 0) or another
        // outermost section began (the epoch moved on).
        loop {
            let now = w.load(Ordering::Acquire);
            if now % EPOCH_ONE == 0 || now / EPOCH_ONE != v / EPOCH_ONE {
                break;
            }
            spin_loop();
            #[cfg(not(shardcount_loom))]
            std::thread::yield_now();
        }
    }
    let readers: &'static Readers = &READERS;
    for _ in 0..2 {
        let old = readers.phase.fetch_add(1, Ordering::Relaxed) & 1;
        for count in &readers.count[old] {
            // Acquire: pairs with the Release decrement in `Pin::drop`.
            while count.load(Ordering::Acquire) != 0 {
                spin_loop();
                #[cfg(not(shardcount_loom))]
                std::thread::yield_now();
            }
        }
    }
}
