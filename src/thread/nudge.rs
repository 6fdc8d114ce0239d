//! Nudges: how a merge hears from a holder that is running but not
//! adding (busy with other work), which neither acknowledges (it does not
//! come to `owner::lease`) nor is seen asleep (`sleepers.rs`).
//!
//! # Protocol
//!
//! * The merge stores the revocation it waits for into the holder's
//!   `ask` word (`owner::Own`), then sends the holder's thread a `SIGURG`
//!   with `rt_tgsigqueueinfo`, tagged as ours (`SI_QUEUE`, this process's
//!   pid, `TAG` as its value). The kernel runs the handler on that
//!   thread at its next return to user space: at once if it runs, when it
//!   is next scheduled if it is preempted.
//! * The handler looks at where the thread stopped (`window::at`). Inside
//!   an owned add's hit whose add has not run, it moves the program
//!   counter back to the hit's start: the thread loads the head again when
//!   it resumes, and sees the retirement. Then, if the thread is inside no
//!   marked window either (`owner::enter`, a read window: its `busy`
//!   count is 0), it answers: it stores `ask` into `answer` (`Release`;
//!   the merge loads it `Acquire`). Every window the thread ran before is
//!   done (program order), and every one after loads the head afresh.
//! * It answers only if the interrupted code's signal mask is the one the
//!   thread registered with. A handler of another signal runs with its
//!   own signal blocked: if it interrupted an add and then added itself,
//!   the nudge would see the inner add's end, not the outer add's
//!   position. (A handler installed with `SA_NODEFER` and an empty mask is
//!   not told apart; the README says so.)
//! * Any other `SIGURG` goes to the action installed before ours (or is
//!   ignored, `SIGURG`'s default). If a later `sigaction` replaced ours,
//!   merges stop nudging ([`available`] checks before each round) and wait
//!   for acknowledgements, as elsewhere.
//!
//! A nudge may interrupt a system call the holder is in: `SA_RESTART`
//! restarts most; those that never restart (`nanosleep`, `epoll_wait`,
//! ...) return `EINTR`, as with any signal, which std and tokio retry.
//! x86-64 Linux only (where the hit is restartable, `window.rs`); not with
//! `SHARDCOUNT_QUIESCE_ONLY` set, as `sleepers.rs`.

#[cfg(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(shardcount_loom)
))]
mod imp {
    use super::super::window::{self, At};
    /// The value a nudge carries, telling it from other `SIGURG`s.
    const TAG: usize = 0x5348_4152_4443_4e54; // "SHARDCNT"
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;

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

    /// The action installed before ours: its handler and flags.
    static BEFORE: AtomicUsize = AtomicUsize::new(0);
    static BEFORE_FLAGS: AtomicUsize = AtomicUsize::new(0);

    /// Installs the handler, once; whether it is installed now.
    pub(crate) fn available() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        *INSTALLED.get_or_init(install) && ours()
    }

    fn install() -> bool {
        if std::env::var_os("SHARDCOUNT_QUIESCE_ONLY").is_some() {
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
            new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGURG, &new, std::ptr::null_mut()) == 0
        }
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

    /// Nudges thread `tid` of this process; whether the signal was sent.
    pub(crate) fn send(tid: i32) -> bool {
        if tid <= 0 {
            return false;
        }
        // SAFETY: getpid and getuid cannot fail.
        let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
        let info = Queued {
            signo: libc::SIGURG,
            errno: 0,
            code: libc::SI_QUEUE,
            _pad: 0,
            pid,
            uid,
            value: TAG,
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
    /// passed on.
    extern "C" fn handler(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a full siginfo for an SA_SIGINFO
        // handler; ours are queued ones, laid out as `Queued`.
        let q = unsafe { &*info.cast::<Queued>() };
        // SAFETY: getpid cannot fail, and is async-signal-safe.
        if q.code == libc::SI_QUEUE && q.value == TAG && q.pid == unsafe { libc::getpid() } {
            // SAFETY: the kernel passes the interrupted context, which
            // the handler may change: it is restored at the return.
            let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
            let pc = &mut uc.uc_mcontext.gregs[libc::REG_RIP as usize];
            match window::at(*pc as usize) {
                At::Restart(start) => {
                    #[cfg(test)]
                    RESTARTS.fetch_add(1, Ordering::Relaxed);
                    *pc = start as i64;
                }
                At::Inside => return,
                At::Outside => {}
            }
            // SAFETY: the first 64 signals of the interrupted mask: Linux's
            // own sigset is one word, glibc's begins with it.
            let mask = unsafe { *std::ptr::from_ref(&uc.uc_sigmask).cast::<u64>() };
            super::super::owner::nudged(mask);
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

    /// The calling thread's signal mask, its first 64 signals.
    pub(crate) fn mask() -> u64 {
        // SAFETY: reads the mask into a zeroed set; changes nothing.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
            *std::ptr::from_ref(&set).cast::<u64>()
        }
    }
}

#[cfg(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(shardcount_loom)
))]
pub(crate) use imp::{available, mask, send};

/// Elsewhere: never.
#[cfg(not(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(shardcount_loom)
)))]
pub(crate) fn available() -> bool {
    false
}

/// Elsewhere: nothing is sent.
#[cfg_attr(shardcount_loom, allow(dead_code))]
#[cfg(not(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(shardcount_loom)
)))]
pub(crate) fn send(_: i32) -> bool {
    false
}

/// Elsewhere: no mask is compared.
#[cfg(not(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(shardcount_loom)
)))]
pub(crate) fn mask() -> u64 {
    0
}

#[cfg(all(
    test,
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(shardcount_loom)
))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    /// A thread adding to its own row in a tight loop is nudged until 100
    /// nudges stopped it inside a hit (most of its loop is the hit) and
    /// moved it back to the hit's start; no count is lost or doubled.
    /// Restarting at the end of a hit, or anywhere but its start, would
    /// double or skip adds.
    #[test]
    fn nudges_during_owned_adds_restart_hits_and_keep_every_count() {
        if !available() {
            return;
        }
        let c = crate::Counter::new();
        c.split(2);
        let (tid, stop) = (AtomicI32::new(0), AtomicBool::new(false));
        let before = imp::RESTARTS.load(Ordering::Relaxed);
        let restarts = || imp::RESTARTS.load(Ordering::Relaxed) - before;
        let added = std::thread::scope(|s| {
            let (c, tid, stop) = (&c, &tid, &stop);
            let adder = s.spawn(move || {
                // Four adds lease and fill the row cache: hits from then on.
                (0..4).for_each(|_| c.add(1));
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
                    send(t);
                }
            }
            stop.store(true, Ordering::Relaxed);
            adder.join().unwrap()
        });
        assert_eq!(c.sum(), added, "a nudge lost or doubled an add");
        assert!(restarts() >= 100, "a minute and no 100 nudges inside a hit");
    }
}
