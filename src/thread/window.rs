//! The owned add's row-cache hit as a *restartable* window, and the table
//! of where each copy of it lies: how a merge's nudge (`nudge.rs`) learns,
//! at no cost to the add, that a running holder is not between a head's
//! load and its add.
//!
//! # Protocol
//!
//! * On x86-64 Linux (not miri, not loom) the hit is one `asm!` block: the
//!   head's load, the compare with the row cache's head, the load of the
//!   cached row, then the add, one `add` to memory (the owner is the word's
//!   only writer, `shard/owned.rs`). Every instruction before the add only
//!   reads, and no register the block's inputs live in is written: stopped
//!   anywhere up to the add (not yet run), the block may start over from
//!   its first instruction and loses or doubles nothing. The kernel's
//!   restartable sequences work the same way; here the nudge's handler
//!   moves the program counter back.
//! * Every copy the compiler makes of the block (one per inlined add)
//!   records its start, its add and its end in the section
//!   `shardcount_windows`, as offsets from the entry (`.long label - .`,
//!   as the kernel's exception tables: no relocation, read-only), kept by
//!   the linker (`"R"`, as `--gc-sections` would drop a section nothing
//!   refers to) and found through the linker's `__start_` and `__stop_`
//!   symbols. [`at`] says where a program counter stands.
//! * A pair add (a histogram's bucket and sum) adds twice. Stopped after
//!   its first add it can neither start over nor count as outside: [`at`]
//!   says `Inside`, and the nudge does not answer.
//! * Elsewhere the hit is Rust code inside a window that `owner::enter`
//!   marks, and no nudge is sent (`nudge.rs`).

/// Code for where the owned add's hit is a restartable window: x86-64
/// Linux, not miri (no `asm!` there) nor loom (its own atomics). The one
/// place the platform is named: `restartable! { items }`,
/// `restartable! { not: items }` for elsewhere, and
/// `restartable! { stmt: statements }` inside a function body.
macro_rules! restartable {
    (not: $($item:item)*) => {
        $(
            #[cfg(not(all(
                target_os = "linux",
                target_arch = "x86_64",
                not(miri),
                not(shardcount_loom)
            )))]
            $item
        )*
    };
    (stmt: $($t:tt)*) => {
        #[cfg(all(
            target_os = "linux",
            target_arch = "x86_64",
            not(miri),
            not(shardcount_loom)
        ))]
        {
            $($t)*
        }
    };
    ($($item:item)*) => {
        $(
            #[cfg(all(
                target_os = "linux",
                target_arch = "x86_64",
                not(miri),
                not(shardcount_loom)
            ))]
            $item
        )*
    };
}
pub(crate) use restartable;

/// Whether the owned add's hit is a restartable window here (the
/// platform of [`restartable!`]).
pub(crate) const RESTARTABLE: bool = {
    restartable! { not: const YES: bool = false; }
    restartable! { const YES: bool = true; }
    YES
};

restartable! {
    /// Where an interrupted program counter stands in the owned adds' hits.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) enum At {
        /// In no hit (or at the end of one: its add is done).
        Outside,
        /// In a hit whose add has not run: start over from this address.
        Restart(usize),
        /// Between a pair add's two adds.
        Inside,
    }
}

restartable! {
    mod imp {
        use super::At;

        /// One hit's place: each field the offset of a label from the field.
        #[repr(C)]
        struct Entry {
            start: i32,
            commit: i32,
            end: i32,
        }

        // SAFETY (of the declaration): the linker defines both for the section
        // `shardcount_windows`, which `at` puts an entry in, so it exists.
        unsafe extern "C" {
            static __start_shardcount_windows: Entry;
            static __stop_shardcount_windows: Entry;
        }

        /// The address a field of an entry points at.
        fn target(field: &i32) -> usize {
            let at = std::ptr::from_ref(field).addr();
            at.wrapping_add_signed(*field as isize)
        }

        /// Every hit's start, add and end, in the order the linker laid the
        /// entries out. Async-signal-safe: reads the section only.
        pub(crate) fn hits() -> impl Iterator<Item = (usize, usize, usize)> {
            // An empty entry, so the section (and its symbols) exist in every
            // program that can ask, whatever it inlined.
            // SAFETY: assembler directives only: one 12-byte entry whose end is
            // its start, in a section of its own; no instruction.
            unsafe {
                std::arch::asm!(
                    ".pushsection shardcount_windows,\"aR\",@progbits",
                    ".balign 4",
                    ".long 0, -4, -8",
                    ".popsection",
                    options(nomem, nostack, preserves_flags),
                );
            }
            // SAFETY: the linker's bounds of the section, which holds only
            // whole `Entry`s (each a `.balign 4` and three `.long`s, 4-aligned).
            let entries: &'static [Entry] = unsafe {
                let start = &raw const __start_shardcount_windows;
                let stop = &raw const __stop_shardcount_windows;
                let len = (stop.addr() - start.addr()) / std::mem::size_of::<Entry>();
                std::slice::from_raw_parts(start, len)
            };
            entries
                .iter()
                .map(|e| (target(&e.start), target(&e.commit), target(&e.end)))
                .filter(|(start, _, end)| start < end)
        }

        /// Where `pc` stands (module docs). Async-signal-safe.
        pub(crate) fn at(pc: usize) -> At {
            for (start, commit, end) in hits() {
                if (start..=commit).contains(&pc) {
                    return At::Restart(start);
                }
                if (commit..end).contains(&pc) {
                    return At::Inside;
                }
            }
            At::Outside
        }

        /// One hit: the head's load, the compare, the row's load, then the
        /// given adds (`{h}` the row's first line), recorded in the section;
        /// the caller's `false` on a miss.
        macro_rules! hit {
            ($($add:literal),+; $($operand:tt)*) => {
                std::arch::asm!(
                    "2:",
                    "mov {h}, qword ptr [{head}]",
                    "cmp {h}, qword ptr [{way} + {at}]",
                    "jne {miss}",
                    "mov {h}, qword ptr [{way} + {at} + 8]",
                    "3:",
                    $($add,)+
                    "4:",
                    ".pushsection shardcount_windows,\"aR\",@progbits",
                    ".balign 4",
                    ".long 2b - ., 3b - ., 4b - .",
                    ".popsection",
                    $($operand)*
                    h = out(reg) _,
                    at = const super::super::owner::WAY_AT,
                    miss = label { return false; },
                    options(nostack),
                )
            };
        }

        /// Adds `n` to word `i` of the row `way` caches, if `way`'s head is
        /// the value `head` holds now; `false` (nothing added) otherwise.
        ///
        /// # Safety
        ///
        /// `head` and `way` point to live words (`way` at an owner cell, whose
        /// row cache entry, its head then its row's first line, lies at
        /// `owner::WAY_AT`), and when the head matches, word
        /// `i` of that row is the calling thread's to write (`owner::Own`).
        #[inline(always)]
        pub(crate) unsafe fn add(head: *const usize, way: *const usize, i: usize, n: u64) -> bool {
            // SAFETY: the caller's promise. Loads of the head and the cache
            // (aligned words, so single-copy atomic, and on x86-64 a plain load
            // is an Acquire one), then one add to a word only this thread
            // writes, as `store_add`'s load and store; no stack.
            unsafe {
                hit!("add qword ptr [{h} + 8*{i}], {n}"; head = in(reg) head, way = in(reg) way, i = in(reg) i, n = in(reg) n,);
            }
            true
        }

        /// [`add`] for word 0 (a `Counter`'s): a register fewer.
        ///
        /// # Safety
        ///
        /// As for [`add`].
        #[inline(always)]
        pub(crate) unsafe fn add_first(head: *const usize, way: *const usize, n: u64) -> bool {
            // SAFETY: as in `add`.
            unsafe {
                hit!("add qword ptr [{h}], {n}"; head = in(reg) head, way = in(reg) way, n = in(reg) n,);
            }
            true
        }

        /// [`add`] for two words of the row: `m` to word `j`, then `n` to
        /// word `i`.
        ///
        /// # Safety
        ///
        /// As for [`add`], for both words.
        #[inline(always)]
        pub(crate) unsafe fn add_pair(
            head: *const usize,
            way: *const usize,
            i: usize,
            n: u64,
            j: usize,
            m: u64,
        ) -> bool {
            // SAFETY: as in `add`.
            unsafe {
                hit!(
                    "add qword ptr [{h} + 8*{j}], {m}",
                    "add qword ptr [{h} + 8*{i}], {n}";
                    head = in(reg) head, way = in(reg) way, i = in(reg) i, n = in(reg) n,
                    j = in(reg) j, m = in(reg) m,
                );
            }
            true
        }
    }

    pub(crate) use imp::{add, add_first, add_pair, at};
}

restartable! {
    #[cfg(test)]
    mod tests {
        use super::*;

        /// Each hit's entry is read back as the block laid out: a start up to
        /// and including the add restarts at the start, between a pair's adds
        /// is inside, and the end is outside. A word added through the hit is
        /// counted once.
        #[test]
        fn every_hit_restarts_from_its_start_until_its_add_has_run() {
            let word = std::sync::atomic::AtomicU64::new(0);
            let head = 0x1000usize;
            // An owner cell's words, its row cache entry at `WAY_AT`.
            let entry = crate::thread::owner::WAY_AT / 8;
            let cell = |head: usize, row: usize| {
                let mut c = [0usize; 16];
                c[entry] = head;
                c[entry + 1] = row;
                c
            };
            let way = cell(head, word.as_ptr().addr());
            // SAFETY: live words; the test's thread is the word's only writer.
            assert!(unsafe { add(&head, way.as_ptr(), 0, 5) });
            let other = cell(0x2000, word.as_ptr().addr());
            // SAFETY: as above; a miss adds nothing.
            assert!(!unsafe { add(&head, other.as_ptr(), 0, 5) });
            let pair = [0u64; 2];
            let way2 = cell(head, pair.as_ptr().addr());
            // SAFETY: as above, two words of `pair`.
            assert!(unsafe { add_pair(&head, way2.as_ptr(), 0, 3, 1, 4) });
            assert_eq!((word.into_inner(), pair), (5, [3, 4]));

            // Each hit starts with the head's load (REX.W MOV, 8B) and commits
            // with an add to memory (REX.W ADD, 01); at least the three above.
            let hits: Vec<_> = imp::hits().collect();
            assert!(hits.len() >= 3, "hits: {hits:x?}");
            for (start, commit, end) in hits {
                // SAFETY: the addresses of instructions in this program's text.
                let (load, add) = unsafe { (*(start as *const [u8; 2]), *(commit as *const [u8; 2])) };
                assert_eq!(
                    (load[0] & 0xF8, load[1]),
                    (0x48, 0x8B),
                    "no load at {start:x}"
                );
                assert_eq!(
                    (add[0] & 0xF8, add[1]),
                    (0x48, 0x01),
                    "no add at {commit:x}"
                );
                assert_eq!(at(start), At::Restart(start));
                assert_eq!(at(commit), At::Restart(start));
                assert_ne!(at(end), At::Restart(start), "the end of a hit is past it");
                assert!(
                    commit < end && end - start < 64,
                    "a hit of {} bytes",
                    end - start
                );
            }
            assert_eq!(at(0), At::Outside);
        }
    }
}
