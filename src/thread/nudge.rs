//! Nudges: how a merge hears from a holder that is running but not
//! adding (busy with other work), which neither acknowledges (it does not
//! come to `owner::lease`) nor is seen asleep (`sleepers.rs`).
//!
//! # Protocol
//!
//! * The merge stores the revocation it waits for into the holder's
//!   `ask` word (`owner::Own`), then sends the holder's thread a `SIGURG`
//!   with `rt_tgsigqueueinfo`, tagged as ours (`SI_QUEUE`, this process's
//!   pid, `TAG` in `si_errno`) and carrying the holder's owner cell as its
//!   value: the handler reaches the cell without a thread-local (whose
//!   first use in a loaded library may allocate). The kernel runs the
//!   handler on that thread at its next return to user space: at once if
//!   it runs, when it is next scheduled if it is preempted.
//! * The handler looks at where the thread stopped (`window::at`). Inside
//!   an owned add's hit whose add has not run, it moves the program
//!   counter back to the hit's start: the thread loads the head again when
//!   it resumes, and sees the retirement. Then, if the thread is inside no
//!   marked window either (an add window past a miss, `owner::enter`,
//!   marks `adding`; a read window marks `busy`) nor between a pair add's
//!   adds, it answers: it stores
//!   `ask` into `answer` (`Release`; the merge loads it `Acquire`). Every
//!   window the thread ran before is done (program order), and every one
//!   after loads the head afresh. Answered or not, it stores `ask` into
//!   `heard`: the merge sends a heard, unanswered nudge again, a few
//!   times, and waits (2 ms at most) only for nudges not yet heard.
//! * It answers only if the interrupted code's signal mask is the one the
//!   thread registered with. A handler of another signal runs with its
//!   own signal blocked: if it interrupted an add and then added itself,
//!   the nudge would see the inner add's end, not the outer add's
//!   position. A thread that registers while it blocks a signal that has
//!   a handler (it may be in that handler) is never answered for. Not told
//!   apart: a handler installed with `SA_NODEFER` whose mask blocks nothing
//!   new. A thread whose mask changed since is not answered for either
//!   (its merges wait, as without nudges).
//! * Any other `SIGURG` goes to the action installed before ours (or is
//!   ignored, `SIGURG`'s default), with our flags (`SA_RESTART`; the
//!   alternate stack if it used one). If a later `sigaction` replaced
//!   ours, merges stop nudging ([`available`] checks before each round)
//!   and wait for acknowledgements, as elsewhere.
//! * The table of hits is the linking object's own (`window.rs`): where
//!   this crate's code is not in the main program (a Rust `dylib`, whose
//!   inlined hits would be in the program's table), no nudge is sent.
//!
//! `SIGURG` is a standard signal: one pending nudge and the process's own
//! `SIGURG` (out-of-band data) merge into one delivery, which the handler
//! passes on only if it is the other's. A process that relies on `SIGURG`
//! sets `SHARDCOUNT_QUIESCE_ONLY`. A nudge may interrupt a system call the
//! holder is in: `SA_RESTART` restarts most; those that never restart
//! (`nanosleep`, `epoll_wait`, ...) return `EINTR`, as with any signal,
//! which std and tokio retry. x86-64 Linux only (where the hit is
//! restartable, `window.rs`); not with `SHARDCOUNT_QUIESCE_ONLY` set, as
//! `sleepers.rs`.

super::window::restartable! {
    mod imp {
        use super::super::owner::Own;
        use super::super::window::{self, At};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::OnceLock;

        /// What a nudge carries in `si_errno`, telling it from other
        /// `SIGURG`s ("SHCN"); its value is the nudged thread's owner cell.
        const TAG: i32 = 0x5348_434e;

        /// The `siginfo_t` of a queued signal, as x86-64 Linux lays it out.
        #[repr(C)]
        struct Queued {
            signo: i32,
            errno: i32,
            code: i32,
            _pad: i32,
            pid: i32,
            uid: u32,
            value: usize,
            _rest: [u64; 12],
        }

        /// Hits the handler moved back to their start (tests).
        #[cfg(test)]
        pub(crate) static RESTARTS: AtomicUsize = AtomicUsize::new(0);

        /// Nudges the handler answered (tests).
        #[cfg(test)]
        pub(crate) static ANSWERED: AtomicUsize = AtomicUsize::new(0);

        /// The action installed before ours: its handler and flags.
        static BEFORE: AtomicUsize = AtomicUsize::new(0);
        static BEFORE_FLAGS: AtomicUsize = AtomicUsize::new(0);

        /// Installs the handler, once; whether it is installed now.
        pub(crate) fn available() -> bool {
            static INSTALLED: OnceLock<bool> = OnceLock::new();
            *INSTALLED.get_or_init(install) && ours()
        }

        fn install() -> bool {
            if std::env::var_os("SHARDCOUNT_QUIESCE_ONLY").is_some() || !in_main_program() {
                return false;
            }
            // SAFETY: sigaction with a zeroed, then filled, action; reads the
            // old one into `old` first, so a handler that runs as soon as ours
            // is in finds the one to pass others' signals to.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGURG, std::ptr::null(), &mut old) != 0 {
                    return false;
                }
                BEFORE_FLAGS.store(old.sa_flags as usize, Ordering::Relaxed);
                BEFORE.store(old.sa_sigaction, Ordering::Release);
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = handler as *const () as usize;
                // The alternate stack only if the action before ours used it:
                // it runs from ours, on whatever stack ours runs on.
                new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | (old.sa_flags & libc::SA_ONSTACK);
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(libc::SIGURG, &new, std::ptr::null_mut()) == 0
            }
        }

        /// Whether this crate's code lies in the main program rather than in
        /// a shared object. The table of hits is the linking object's own:
        /// built into a Rust `dylib`, the hits inlined into the program that
        /// uses it would be missing from it, so such a process never nudges.
        fn in_main_program() -> bool {
            /// The first object `dl_iterate_phdr` reports is the program.
            unsafe extern "C" fn first(
                info: *mut libc::dl_phdr_info,
                _: libc::size_t,
                data: *mut libc::c_void,
            ) -> libc::c_int {
                // SAFETY: the loader passes a valid entry, and `data` is the
                // `bool` below.
                let (info, found) = unsafe { (&*info, &mut *data.cast::<bool>()) };
                let here = (handler as *const ()).addr();
                // SAFETY: `dlpi_phnum` headers at `dlpi_phdr`.
                let headers =
                    unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
                *found = headers.iter().any(|h| {
                    let start = (info.dlpi_addr as usize).wrapping_add(h.p_vaddr as usize);
                    h.p_type == libc::PT_LOAD && (start..start + h.p_memsz as usize).contains(&here)
                });
                1 // the program only
            }
            let mut found = false;
            // SAFETY: a callback that reads what the loader passes, and stops
            // after the first object.
            unsafe { libc::dl_iterate_phdr(Some(first), std::ptr::from_mut(&mut found).cast()) };
            found
        }

        /// Whether the action for `SIGURG` is still ours.
        fn ours() -> bool {
            // SAFETY: reads the current action into a zeroed one.
            unsafe {
                let mut now: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGURG, std::ptr::null(), &mut now) == 0
                    && now.sa_sigaction == handler as *const () as usize
            }
        }

        /// Nudges thread `tid` of this process, whose owner cell is `cell`;
        /// whether the signal was sent.
        pub(crate) fn send(tid: i32, cell: *const Own) -> bool {
            if tid <= 0 {
                return false;
            }
            // SAFETY: getpid and getuid cannot fail.
            let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
            let info = Queued {
                signo: libc::SIGURG,
                errno: TAG,
                code: libc::SI_QUEUE,
                _pad: 0,
                pid,
                uid,
                value: cell.addr(),
                _rest: [0; 12],
            };
            // SAFETY: a full-size siginfo for a signal to a thread of this
            // process, which `rt_tgsigqueueinfo` only reads.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_tgsigqueueinfo,
                    pid,
                    tid,
                    libc::SIGURG,
                    std::ptr::from_ref(&info),
                ) == 0
            }
        }

        /// The handler: a nudge is answered (module docs), anything else
        /// passed on. A nudge carries its thread's owner cell as its value,
        /// and the handler answers only if that is this thread's own cell
        /// (a const thread-local of the main program, where alone the
        /// handler is installed: a plain load, no allocation): another
        /// process can queue a signal with this pid and tag, and a value of
        /// its choosing.
        extern "C" fn handler(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
            // SAFETY: the kernel passes a full siginfo for an SA_SIGINFO
            // handler; queued ones are laid out as `Queued`.
            let q = unsafe { &*info.cast::<Queued>() };
            // SAFETY: getpid cannot fail, and is async-signal-safe.
            let pid = unsafe { libc::getpid() };
            if q.code == libc::SI_QUEUE
                && q.errno == TAG
                && q.pid == pid
                && q.value == super::super::owner::way().addr()
            {
                // SAFETY: the kernel passes the interrupted context, which
                // the handler may change: it is restored at the return.
                let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
                let pc = &mut uc.uc_mcontext.gregs[libc::REG_RIP as usize];
                let stopped = window::at(*pc as usize);
                #[cfg(test)]
                ANSWERED.fetch_add(1, Ordering::Relaxed);
                if let At::Restart(start) = stopped {
                    #[cfg(test)]
                    RESTARTS.fetch_add(1, Ordering::Relaxed);
                    *pc = start as i64;
                }
                // SAFETY: the first 64 signals of the interrupted mask: Linux's
                // own sigset is one word, glibc's begins with it.
                let mask = unsafe { *std::ptr::from_ref(&uc.uc_sigmask).cast::<u64>() };
                // SAFETY: this thread's own owner cell (checked above), alive
                // while the thread runs.
                let cell = unsafe { &*super::super::owner::way().cast::<Own>() };
                cell.nudged(stopped != At::Inside, mask);
                return;
            }
            let before = BEFORE.load(Ordering::Acquire);
            if before == libc::SIG_DFL || before == libc::SIG_IGN {
                return;
            }
            if BEFORE_FLAGS.load(Ordering::Relaxed) & libc::SA_SIGINFO as usize != 0 {
                // SAFETY: the action installed before ours, with SA_SIGINFO:
                // a three-argument handler, called as the kernel would.
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(before) };
                f(sig, info, ctx);
            } else {
                // SAFETY: as above, without SA_SIGINFO: a one-argument one.
                let f: extern "C" fn(i32) = unsafe { std::mem::transmute(before) };
                f(sig);
            }
        }

        /// What the calling thread's nudges compare the interrupted mask with:
        /// its signal mask (the first 64 signals), or [`NEVER`] if a signal it
        /// blocks has a handler (it may be inside that handler now, which may
        /// have interrupted an add).
        pub(crate) fn mask() -> u64 {
            // SAFETY: reads the mask into a zeroed set; changes nothing.
            let mask = unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
                *std::ptr::from_ref(&set).cast::<u64>()
            };
            let handled = (1..=64).filter(|s| mask & (1 << (s - 1)) != 0).any(|s| {
                // SAFETY: reads signal `s`'s action into a zeroed one.
                unsafe {
                    let mut now: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(s, std::ptr::null(), &mut now) == 0
                        && now.sa_sigaction != libc::SIG_DFL
                        && now.sa_sigaction != libc::SIG_IGN
                }
            });
            if handled {
                NEVER
            } else {
                mask
            }
        }

        /// A mask no interrupted code runs with: `SIGKILL` cannot be blocked.
        pub(crate) const NEVER: u64 = 1 << (libc::SIGKILL - 1);

        /// Whether a thread registered with `mask` ([`mask`]) can answer a
        /// nudge: not if it blocked `SIGURG` then (the signal would stay
        /// pending, and a `signalfd` reader would read it), nor if no
        /// interrupted code runs with its mask.
        pub(crate) fn hears(mask: u64) -> bool {
            mask != NEVER && mask & (1 << (libc::SIGURG - 1)) == 0
        }
    }

    pub(crate) use imp::{available, hears, mask, send};
}

super::window::restartable! { not:
    /// Elsewhere: never.
    pub(crate) fn available() -> bool {
        false
    }

    /// Elsewhere: nothing is sent.
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    pub(crate) fn send(_: i32, _: *const super::owner::Own) -> bool {
        false
    }

    /// Elsewhere: no mask is compared.
    pub(crate) fn mask() -> u64 {
        0
    }

    /// Elsewhere: nothing is sent to hear.
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    pub(crate) fn hears(_: u64) -> bool {
        false
    }
}

super::window::restartable! {
    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

        /// A tagged nudge whose value is not the thread's own cell (another
        /// process can queue one with this pid and tag) is not answered:
        /// the handler dereferenced the value, and 0x10 crashed the
        /// process.
        #[test]
        fn a_nudge_naming_a_cell_not_the_threads_own_is_ignored() {
            if !available() {
                return;
            }
            // SAFETY: gettid cannot fail.
            let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
            // Delivered to this thread before the system call returns.
            assert!(send(me, std::ptr::without_provenance(0x10)));
            assert!(send(me, std::ptr::without_provenance(usize::MAX - 7)));
        }

        /// A thread adding to its own row in a tight loop is nudged until 100
        /// nudges stopped it inside a hit (most of its loop is the hit) and
        /// moved it back to the hit's start, or for a minute; no count is
        /// lost or doubled. Restarting at the end of a hit, or anywhere but
        /// its start, would double or skip adds. (Alone it takes about a
        /// second; one CI run on a host loaded with builds was still short
        /// of 100 after a minute, so a minute needs only 10.)
        #[test]
        fn nudges_during_owned_adds_restart_hits_and_keep_every_count() {
            if !available() {
                return;
            }
            // Rows for every id the tests running alongside may hold: an id
            // beyond the table would add to its shared rows, never a hit.
            let c = crate::Counter::with_max_shards(256);
            c.split(256);
            let (tid, stop) = (AtomicI32::new(0), AtomicBool::new(false));
            let cell = AtomicUsize::new(0);
            let before = imp::RESTARTS.load(Ordering::Relaxed);
            let restarts = || imp::RESTARTS.load(Ordering::Relaxed) - before;
            let answered = imp::ANSWERED.load(Ordering::Relaxed);
            let row = AtomicUsize::new(usize::MAX);
            let added = std::thread::scope(|s| {
                let (c, tid, stop, cell, row) = (&c, &tid, &stop, &cell, &row);
                let adder = s.spawn(move || {
                    // Four adds lease and fill the row cache: hits from then on
                    // (again four adds after each merge alongside revokes it).
                    (0..4).for_each(|_| c.add(1));
                    row.store(crate::thread::owner::row(), Ordering::Relaxed);
                    cell.store(
                        crate::thread::owner::way().expose_provenance(),
                        Ordering::Relaxed,
                    );
                    tid.store(crate::thread::sleepers::tid(), Ordering::Release);
                    let mut added = 4u64;
                    while !stop.load(Ordering::Relaxed) {
                        (0..1000).for_each(|_| c.add(1));
                        added += 1000;
                    }
                    added
                });
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while restarts() < 100 && std::time::Instant::now() < deadline {
                    let t = tid.load(Ordering::Acquire);
                    if t != 0 {
                        let own = std::ptr::with_exposed_provenance(cell.load(Ordering::Relaxed));
                        send(t, own);
                    }
                }
                stop.store(true, Ordering::Relaxed);
                adder.join().unwrap()
            });
            assert_eq!(c.sum(), added, "a nudge lost or doubled an add");
            let answered = imp::ANSWERED.load(Ordering::Relaxed) - answered;
            assert!(
                restarts() >= 10,
                "a minute and {} nudges inside a hit of {answered} answered \
                 (the adder's row: {}, {added} adds)",
                restarts(),
                row.load(Ordering::Relaxed),
            );
        }

        /// A `SIGUSR1` handler that adds to the counter its thread is adding
        /// to, sent thousands of times to two adders, while nudges stop them
        /// (inside the handler's adds too) and move hits back: every add is
        /// counted once, the handler's included. An add to the owned row is
        /// one instruction, so a handler that runs between an add's load of
        /// the row and its add adds on top, not underneath.
        #[test]
        fn adds_from_a_signal_handler_amid_nudges_are_all_counted() {
            static C: crate::Counter = crate::Counter::with_max_shards(256);
            static HANDLED: AtomicUsize = AtomicUsize::new(0);
            extern "C" fn on_usr1(_: i32) {
                C.add(1);
                HANDLED.fetch_add(1, Ordering::Relaxed);
            }
            if !available() {
                return;
            }
            C.split(256);
            // SAFETY: installs a handler for SIGUSR1, which nothing else in
            // the test binary uses; SA_RESTART keeps the adders' calls going.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_usr1 as *const () as usize;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                assert_eq!(
                    libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
                    0
                );
            }
            let (stop_adding, stop) = (AtomicBool::new(false), AtomicBool::new(false));
            let counts = [const { AtomicU64::new(0) }; 2];
            let (tids, cells) = (
                [const { AtomicI32::new(0) }; 2],
                [const { AtomicUsize::new(0) }; 2],
            );
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                for k in 0..2 {
                    let (stop_adding, stop, counts) = (&stop_adding, &stop, &counts);
                    let (tids, cells) = (&tids, &cells);
                    s.spawn(move || {
                        (0..4).for_each(|_| C.add(1));
                        let own = crate::thread::owner::way().expose_provenance();
                        cells[k].store(own, Ordering::Relaxed);
                        tids[k].store(crate::thread::sleepers::tid(), Ordering::Release);
                        let mut added = 4;
                        while !stop_adding.load(Ordering::Relaxed) {
                            (0..1000).for_each(|_| C.add(1));
                            added += 1000;
                        }
                        counts[k].store(added, Ordering::Release);
                        // Alive until no signal can be sent to this thread id.
                        while !stop.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                    });
                }
                let signaller = s.spawn(|| {
                    let mut k = 0;
                    while !done.load(Ordering::Acquire) {
                        k ^= 1;
                        let t = tids[k].load(Ordering::Acquire);
                        if t == 0 {
                            continue;
                        }
                        // SAFETY: getpid cannot fail; a signal to a live thread
                        // of this process (the adders wait for `stop`).
                        unsafe {
                            libc::syscall(libc::SYS_tgkill, libc::getpid(), t, libc::SIGUSR1);
                        }
                        let own = std::ptr::with_exposed_provenance(cells[k].load(Ordering::Relaxed));
                        send(t, own);
                    }
                });
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while HANDLED.load(Ordering::Relaxed) < 2_000 && std::time::Instant::now() < deadline {
                    std::thread::yield_now();
                }
                stop_adding.store(true, Ordering::Relaxed);
                while counts.iter().any(|c| c.load(Ordering::Acquire) == 0) {
                    std::thread::yield_now();
                }
                done.store(true, Ordering::Release);
                signaller.join().unwrap();
                stop.store(true, Ordering::Release);
            });
            let handled = HANDLED.load(Ordering::Relaxed) as u64;
            let adds: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            assert!(handled >= 2_000, "a minute and {handled} SIGUSR1s handled");
            assert_eq!(C.sum(), adds + handled, "an add lost or doubled");
        }
    }
}
