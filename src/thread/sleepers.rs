//! Whether a thread is asleep in the kernel right now, read from
//! `/proc/self/task/<tid>/stat`: how a merge learns, with no cost to any
//! add, that a thread holding an owner id is outside every *window* (the
//! places where a holder uses a table unpinned: `owner.rs`, "Sleepers").
//!
//! A window makes no system call, takes no lock and allocates nothing, so
//! a thread in state `S` (interruptible sleep: a futex, `epoll_wait`, a
//! `read`, `nanosleep`; every parked pool thread) is outside all of them.
//! Only `S` counts: `R` may be preempted inside a window, and `D` may be a
//! page fault inside one. On x86_64 the stores of every window the thread
//! ran come before its store of the sleeping state (program order, and
//! TSO keeps stores in order), so a merge that read that state and then
//! reads the table sees them; a window the thread begins after waking
//! loads the head after the merge's locked retirement, which was globally
//! visible before the merge read the state. Other architectures, other
//! systems, miri, and `SHARDCOUNT_QUIESCE_ONLY` set (to anything) use the
//! acknowledgements alone.
//!
//! Not covered: a page fault that sleeps in `S` inside a window
//! (`userfaultfd` on the counters' memory), and a signal handler that
//! blocks while it interrupts a window. Such a process sets the variable.

/// Whether this process reads sleeping states: asked once.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
pub(crate) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::env::var_os("SHARDCOUNT_QUIESCE_ONLY").is_none() && state(tid()).is_some()
    })
}

/// Elsewhere: never.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri))))]
pub(crate) fn available() -> bool {
    false
}

/// The calling thread's id for [`asleep`] (0 where there is none).
pub(crate) fn tid() -> i32 {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `gettid` takes nothing and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        i32::try_from(tid).unwrap_or(0)
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        0
    }
}

/// Whether thread `tid` of this process is in interruptible sleep now.
/// Allocates nothing (its caller holds the owners' mutex, which an add
/// from a counting allocator would take).
#[cfg_attr(shardcount_loom, allow(dead_code))]
pub(crate) fn asleep(tid: i32) -> bool {
    available() && state(tid) == Some(b'S')
}

/// The state letter of thread `tid` of this process, if it can be read.
#[cfg(all(target_os = "linux", not(miri)))]
fn state(tid: i32) -> Option<u8> {
    if tid <= 0 {
        return None;
    }
    // "/proc/self/task/<tid>/stat", NUL-terminated, on the stack.
    let mut path = [0u8; 48];
    let mut at = 0;
    for part in [
        &b"/proc/self/task/"[..],
        digits(tid, &mut [0; 10]),
        b"/stat",
    ] {
        path[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    // SAFETY: a NUL-terminated path (the array's tail is zeros).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 512];
    // SAFETY: reads at most the buffer's length into it, from our own fd.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: the fd opened above, closed once.
    unsafe { libc::close(fd) };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    // "tid (comm) S ...": the name may hold spaces and parentheses, so the
    // state follows the last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    text.get(close + 2).copied()
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn state(_: i32) -> Option<u8> {
    None
}

/// `n`'s decimal digits, written into the end of `buf`.
#[cfg(all(target_os = "linux", not(miri)))]
fn digits(mut n: i32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    /// A thread blocked on a channel reads as asleep, the thread asking
    /// (running) does not, and a made-up id reads as neither.
    #[test]
    fn a_blocked_thread_reads_as_asleep_and_a_running_one_does_not() {
        if !available() {
            return;
        }
        assert!(!asleep(tid()), "the calling thread is running");
        assert!(!asleep(i32::MAX), "no such thread");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (id_tx, id_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            id_tx.send(tid()).unwrap();
            let _ = rx.recv();
        });
        let id = id_rx.recv().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !asleep(id) {
            assert!(std::time::Instant::now() < deadline, "never seen asleep");
            std::thread::yield_now();
        }
        drop(tx);
        t.join().unwrap();
    }
}
