//! Timing primitives: the barrier, pinning, self-timed threads, the canary
//! and the paired [`Session`] that turns runs into ratios.
//!
//! The method is the one in `shared/notes/measuring-here.md`: every subject
//! is timed in the same repetition as its reference, in alternating order;
//! ratios are taken within a repetition; repetitions whose empty-loop canary
//! ran slow (a busy phase of the host) are set aside; the median and range
//! of the kept ratios are what gets printed.

use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// A compiler barrier that emits no instruction: keeps loops from being
/// folded or hoisted without adding a store to each iteration (which
/// `std::hint::black_box` would, and a locked add would wait for).
#[inline(always)]
pub fn opaque() {
    // SAFETY: an empty asm block touches no memory, stack or flags.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) }
}

/// Hands `x`'s address to the optimiser's unknown once, so that every later
/// [`opaque`] barrier must assume `x` may have changed. Without it, loads
/// from a local that never escapes can be hoisted out of a timed loop
/// (`asm!` can only touch memory whose address escaped). Call it once before
/// the loop, never inside.
pub fn escape<T: ?Sized>(x: &T) -> &T {
    std::hint::black_box(x)
}

/// The cores this process may use, read once.
///
/// Read once because `get_core_ids` lists only the cores the *calling*
/// thread may use: after one pin it would shrink to that core, and every
/// later thread (which inherits the mask) would pile onto it. The first
/// call must therefore come from an unpinned thread; [`Session::new`] and
/// [`run_threads`] see to that for the benches.
fn core_ids() -> &'static [core_affinity::CoreId] {
    static CORES: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// How many cores the measuring threads are spread over.
///
/// Unlike `std::thread::available_parallelism`, which follows the calling
/// thread's affinity (1 on a pinned thread), this is the core list read
/// once, so it does not change after [`pin`].
pub fn cores() -> usize {
    match core_ids().len() {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Pins the calling thread to core `i` modulo the core count, if possible.
pub fn pin(i: usize) {
    let cores = core_ids();
    if !cores.is_empty() {
        core_affinity::set_for_current(cores[i % cores.len()]);
    }
}

/// Runs `work(thread_index)` on `threads` pinned threads started through a
/// barrier; returns each thread's own `(start, end)` clock readings.
///
/// The handles are joined one by one, and a join returns only after the
/// thread has fully exited, thread-local destructors included: so anything
/// a thread folds at exit (see `subjects::TlLimit`) is visible afterwards.
fn thread_spans<F>(threads: usize, work: &F) -> Vec<(Instant, Instant)>
where
    F: Fn(usize) + Sync,
{
    // Read the core list here, on the unpinned spawning thread.
    let _ = core_ids();
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    pin(t);
                    barrier.wait();
                    let start = Instant::now();
                    work(t);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("measuring thread panicked"))
            .collect()
    })
}

/// Runs `work(thread_index)` on `threads` pinned threads (round-robin over
/// the cores when oversubscribed) started through a barrier; returns the
/// time from the first thread starting its work to the last one finishing.
///
/// The threads time themselves: the spawning thread is not pinned, and with
/// every core busy it may not run again until the work is over, so a clock
/// it read after the barrier would say almost nothing had elapsed.
pub fn run_threads<F>(threads: usize, work: F) -> Duration
where
    F: Fn(usize) + Sync,
{
    let spans = thread_spans(threads, &work);
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    last - first
}

/// Adds between two looks at the clock in a [`run_window`] loop. A look
/// (an `Instant::now`, 33 ns on the Intel host, `tsc` clock source) is the
/// same for every subject, and a small share of a chunk: 0.7% of 1,024
/// locked adds on a thread's own line (4.4 ns each), 2% of 1,024 owned-row
/// adds (1.5 ns), 11% of 1,024 thread-local `Cell` adds (0.3 ns).
pub const WINDOW_CHUNK: u64 = 1024;

/// What one thread did in a [`run_window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Did {
    /// When the thread was released.
    pub start: Instant,
    /// Adds made: whole chunks of [`WINDOW_CHUNK`].
    pub adds: u64,
    /// The time they took, from the release: at least the window.
    pub elapsed: Duration,
    /// The time the first chunk took (the clock is looked at after each
    /// chunk anyway, so noting this one changes nothing in the loop).
    pub first: Duration,
}

/// `add` in a tight loop on `threads` pinned threads released together,
/// each for `window` by its own clock, looked at every [`WINDOW_CHUNK`]
/// adds; returns what each thread did.
///
/// The threads meet at a barrier, then spin until all have arrived (when
/// each has a core of its own), so that they start together: a barrier
/// alone releases its waiters through futex wake-ups, which can leave one
/// thread adding alone for microseconds, a share of a millisecond that
/// matters to a counter that must first see contention.
pub fn run_window<F>(threads: usize, window: Duration, add: F) -> Vec<Did>
where
    F: Fn() + Sync,
{
    // Read the core list here, on the unpinned spawning thread.
    let spin = threads <= cores();
    let barrier = Barrier::new(threads);
    let arrived = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, arrived, add) = (&barrier, &arrived, &add);
                s.spawn(move || {
                    pin(t);
                    barrier.wait();
                    if spin {
                        use std::sync::atomic::Ordering;
                        // Relaxed: a count of arrivals; nothing is published.
                        arrived.fetch_add(1, Ordering::Relaxed);
                        while arrived.load(Ordering::Relaxed) < threads {
                            std::hint::spin_loop();
                        }
                    }
                    let start = Instant::now();
                    let mut adds = 0;
                    let mut first = None;
                    loop {
                        for _ in 0..WINDOW_CHUNK {
                            add();
                            opaque();
                        }
                        adds += WINDOW_CHUNK;
                        let elapsed = start.elapsed();
                        let first = *first.get_or_insert(elapsed);
                        if elapsed >= window {
                            return Did {
                                start,
                                adds,
                                elapsed,
                                first,
                            };
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("measuring thread panicked"))
            .collect()
    })
}

/// Iterations of the canary's empty loop: a few milliseconds on these hosts.
const CANARY_ITERS: u64 = 10_000_000;

/// A repetition is set aside when its canary is over this many times the
/// fastest canary of the run. Public so that the contention demo judges its
/// rounds by the same rule.
pub const CANARY_LIMIT: f64 = 1.5;

#[inline(never)]
fn empty_loop(iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        opaque();
    }
    start.elapsed()
}

/// The canary: an empty loop timed on each core that `threads` measuring
/// threads use (on the calling thread when `threads` is 1); the slowest.
///
/// It runs slower in the host's busy phases, in which ratios shift, so a
/// slow canary next to a measurement marks the measurement as suspect.
pub fn canary(threads: usize) -> Duration {
    if threads <= 1 {
        return empty_loop(CANARY_ITERS);
    }
    thread_spans(threads.min(cores()), &|_| {
        empty_loop(CANARY_ITERS);
    })
    .into_iter()
    .map(|(start, end)| end - start)
    .max()
    .expect("at least one thread")
}

/// The median of `xs` (sorts in place). Panics on an empty slice.
pub fn median(xs: &mut [f64]) -> f64 {
    assert!(!xs.is_empty(), "median of nothing");
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A median with the range it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The median and range of `xs`. Panics on an empty slice.
    pub fn of(xs: &[f64]) -> Spread {
        let mut v = xs.to_vec();
        let median = median(&mut v);
        Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

/// Repetitions for a paired section: `SHARDCOUNT_REPS`, else `default`.
pub fn reps(default: usize) -> usize {
    std::env::var("SHARDCOUNT_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// The `main` of a bench with a paired section: criterion's groups (then
/// criterion's summary), then the paired section. `SHARDCOUNT_PAIRED=skip`
/// leaves out the paired section, `=only` runs only it.
pub fn bench_main(criterion_groups: impl FnOnce(), paired: impl FnOnce()) {
    let mode = std::env::var("SHARDCOUNT_PAIRED").unwrap_or_default();
    if mode != "only" {
        criterion_groups();
        criterion::Criterion::default()
            .configure_from_args()
            .final_summary();
    }
    if mode != "skip" {
        paired();
    }
}

/// Which way a figure's ratios point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ratio {
    /// Time per operation over the reference's: below 1 is cheaper.
    Cost,
    /// Throughput over the reference's (the reference's time per operation
    /// over the subject's): above 1 is faster.
    Throughput,
}

/// One subject of a figure: what it is called and how to run it.
struct Entry<'a> {
    name: String,
    /// Runs `n` operations on each measuring thread, checks the result and
    /// returns the wall time.
    run: Box<dyn FnMut(u64) -> Duration + 'a>,
}

/// A table of subjects measured in the same repetitions as a reference:
/// build it with [`Figure::new`], [`reference`](Figure::reference) and
/// [`vs`](Figure::vs), then hand it to [`Session::run`].
pub struct Figure<'a> {
    title: String,
    threads: usize,
    ratio: Ratio,
    entries: Vec<Entry<'a>>,
    /// Extra lines: subject `a` over subject `b`, both by name.
    pairs: Vec<(String, String)>,
}

impl<'a> Figure<'a> {
    /// An empty figure. `threads` is how many threads each subject's run
    /// uses (it sizes the canary and labels the table).
    pub fn new(title: impl Into<String>, threads: usize, ratio: Ratio) -> Self {
        Figure {
            title: title.into(),
            threads,
            ratio,
            entries: Vec::new(),
            pairs: Vec::new(),
        }
    }

    /// Sets the reference every other subject is divided by. `run(n)`
    /// performs `n` operations on each of the figure's threads, verifies the
    /// count, and returns the wall time.
    pub fn reference(
        mut self,
        name: impl Into<String>,
        run: impl FnMut(u64) -> Duration + 'a,
    ) -> Self {
        assert!(self.entries.is_empty(), "the reference comes first");
        self.entries.push(Entry {
            name: name.into(),
            run: Box::new(run),
        });
        self
    }

    /// Adds a subject, measured like the reference.
    pub fn vs(mut self, name: impl Into<String>, run: impl FnMut(u64) -> Duration + 'a) -> Self {
        assert!(!self.entries.is_empty(), "set the reference first");
        self.entries.push(Entry {
            name: name.into(),
            run: Box::new(run),
        });
        self
    }

    /// Also prints subject `a` against subject `b` (both already added),
    /// a ratio taken within each repetition like the others.
    pub fn compare(mut self, a: &str, b: &str) -> Self {
        for name in [a, b] {
            assert!(
                self.entries.iter().any(|e| e.name == name),
                "compare: no subject {name:?} in {:?}",
                self.title
            );
        }
        self.pairs.push((a.to_string(), b.to_string()));
        self
    }
}

/// A figure of short fixed windows (the first millisecond of a burst):
/// each subject runs once per repetition on fresh state for `window`, and
/// its throughput is the adds its threads made over the time they took.
/// Build it like a [`Figure`], then hand it to [`Session::run_windows`].
pub struct WindowFigure<'a> {
    title: String,
    threads: usize,
    window: Duration,
    windows: usize,
    /// Each subject: its name and a run over one window, which makes the
    /// subject afresh, calls [`run_window`], checks the count and returns
    /// what [`run_window`] did.
    entries: Vec<(String, WindowRun<'a>)>,
    pairs: Vec<(String, String)>,
}

/// One window of one subject: what each of its threads did.
type WindowRun<'a> = Box<dyn FnMut(Duration) -> Vec<Did> + 'a>;

impl<'a> WindowFigure<'a> {
    /// An empty figure of `windows` repetitions (`SHARDCOUNT_WINDOWS`
    /// overrides it) of `window` each on `threads` threads.
    pub fn new(title: impl Into<String>, threads: usize, window: Duration, windows: usize) -> Self {
        let windows = std::env::var("SHARDCOUNT_WINDOWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(windows);
        WindowFigure {
            title: title.into(),
            threads,
            window,
            windows,
            entries: Vec::new(),
            pairs: Vec::new(),
        }
    }

    /// Sets the reference. `run(window)` makes the subject afresh, runs it
    /// through [`run_window`] for `window`, checks the count and returns
    /// what each thread did.
    pub fn reference(
        mut self,
        name: impl Into<String>,
        run: impl FnMut(Duration) -> Vec<Did> + 'a,
    ) -> Self {
        assert!(self.entries.is_empty(), "the reference comes first");
        self.entries.push((name.into(), Box::new(run)));
        self
    }

    /// Adds a subject, measured like the reference.
    pub fn vs(
        mut self,
        name: impl Into<String>,
        run: impl FnMut(Duration) -> Vec<Did> + 'a,
    ) -> Self {
        assert!(!self.entries.is_empty(), "set the reference first");
        self.entries.push((name.into(), Box::new(run)));
        self
    }

    /// Also prints subject `a` against subject `b`, as [`Figure::compare`].
    pub fn compare(mut self, a: &str, b: &str) -> Self {
        for name in [a, b] {
            assert!(
                self.entries.iter().any(|e| e.0 == name),
                "compare: no subject {name:?} in {:?}",
                self.title
            );
        }
        self.pairs.push((a.to_string(), b.to_string()));
        self
    }
}

/// A window whose threads ran together for less than this share of the
/// shorter thread's time is set aside: one thread was held up (a vCPU
/// taken away), so for part of it the other ran alone.
pub const WINDOW_TOGETHER: f64 = 0.9;

/// The share of the shortest thread's time that all of `did`'s threads
/// ran together (1: all the time).
fn together(did: &[Did]) -> f64 {
    let start = did.iter().map(|d| d.start).max().expect("threads");
    let end = did
        .iter()
        .map(|d| d.start + d.elapsed)
        .min()
        .expect("threads");
    let shortest = did.iter().map(|d| d.elapsed).min().expect("threads");
    end.saturating_duration_since(start).as_secs_f64() / shortest.as_secs_f64()
}

/// A measured figure, kept until the session prints.
struct Measured {
    title: String,
    threads: usize,
    ratio: Ratio,
    names: Vec<String>,
    pairs: Vec<(String, String)>,
    /// Per repetition: seconds per operation per thread, by subject.
    per_op: Vec<Vec<f64>>,
    /// Per repetition: the slowest canary around it.
    canary: Vec<f64>,
    /// Per repetition: set aside apart from its canary (a window whose
    /// threads did not run together: [`WINDOW_TOGETHER`]).
    apart: Vec<bool>,
    /// The shortest single run of any subject, to show that runs were long.
    shortest: Duration,
}

/// A paired section: figures are measured one after the other and printed
/// together by [`finish`](Session::finish), once the fastest canary of the
/// whole run is known.
///
/// `SHARDCOUNT_REPS` sets the repetitions, `SHARDCOUNT_ONLY=<substring>`
/// measures only the figures whose title contains it (case-insensitive).
pub struct Session {
    bench: String,
    reps: usize,
    only: Option<String>,
    /// What each subject's run is sized to in each repetition.
    target: Duration,
    fastest_canary: f64,
    measured: Vec<Measured>,
    /// Whether any figure was a [`WindowFigure`] (the header says so).
    windowed: bool,
}

/// Probe runs grow until one takes at least this long.
const PROBE: Duration = Duration::from_millis(20);

/// No timed run is kept below this: shorter multi-thread runs give
/// nonsense on these hosts.
const MIN_RUN: Duration = Duration::from_millis(100);

impl Session {
    /// A session for bench `bench`, with `default_reps` repetitions unless
    /// `SHARDCOUNT_REPS` says otherwise. Pins the calling thread to the first
    /// core: one-thread figures run on it.
    pub fn new(bench: &str, default_reps: usize) -> Self {
        // Both read the calling thread's affinity once and keep it, so both
        // must be read before the pin below.
        let _ = cores();
        let _ = shardcount::Counter::new().max_shards();
        pin(0);
        let only = std::env::var("SHARDCOUNT_ONLY")
            .ok()
            .filter(|s| !s.is_empty())
            .map(|s| s.to_lowercase());
        Session {
            bench: bench.to_string(),
            reps: reps(default_reps),
            only,
            target: Duration::from_millis(200),
            fastest_canary: f64::INFINITY,
            measured: Vec::new(),
            windowed: false,
        }
    }

    /// Whether the `SHARDCOUNT_ONLY` filter lets a figure with this title
    /// run: to skip building what an unwanted figure needs.
    pub fn wants(&self, title: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| title.to_lowercase().contains(o))
    }

    /// Measures `figure`: sizes each subject's run to about 200 ms, then
    /// runs every subject once per repetition, alternating the order, with
    /// a canary before the first and after each one. A run under 100 ms is
    /// resized and run again.
    pub fn run(&mut self, mut figure: Figure<'_>) {
        if !self.wants(&figure.title) {
            return;
        }
        assert!(!figure.entries.is_empty(), "a figure needs a reference");
        let threads = figure.threads;
        eprintln!("paired: {} ...", figure.title);
        let mut sizes: Vec<u64> = figure
            .entries
            .iter_mut()
            .map(|e| size_run(&mut *e.run, self.target))
            .collect();
        let k = figure.entries.len();
        let mut per_op = Vec::with_capacity(self.reps);
        let mut canaries = Vec::with_capacity(self.reps);
        let mut shortest = Duration::MAX;
        for rep in 0..self.reps {
            let mut times = vec![0.0; k];
            let mut slowest = self.note_canary(canary(threads));
            for j in 0..k {
                let i = if rep % 2 == 0 { j } else { k - 1 - j };
                let run = &mut figure.entries[i].run;
                let mut t = run(sizes[i]);
                // Sized in a busy phase, a run can come out short in a quiet
                // one: resize and run again rather than keep it.
                while t < MIN_RUN {
                    sizes[i] = scale(sizes[i], t, self.target);
                    t = run(sizes[i]);
                }
                shortest = shortest.min(t);
                times[i] = t.as_secs_f64() / sizes[i] as f64;
                slowest = slowest.max(self.note_canary(canary(threads)));
            }
            per_op.push(times);
            canaries.push(slowest);
        }
        self.measured.push(Measured {
            title: figure.title,
            threads,
            ratio: figure.ratio,
            names: figure.entries.into_iter().map(|e| e.name).collect(),
            pairs: figure.pairs,
            apart: vec![false; canaries.len()],
            per_op,
            canary: canaries,
            shortest,
        });
    }

    /// Measures a [`WindowFigure`]: per repetition, every subject once for
    /// one window, alternating the order, with a canary before the first
    /// and after each one, as [`run`](Session::run). A window's time per
    /// operation is the figure's threads over the summed throughput of its
    /// threads (each thread's adds over its own time), so Mops/s is the
    /// total rate. Nothing is sized or warmed up: the first repetitions'
    /// windows are the process's first, and are kept.
    ///
    /// Two tables come of it: the whole windows, and the first
    /// [`WINDOW_CHUNK`] adds of each thread (first-use slow paths show
    /// there, if anywhere).
    pub fn run_windows(&mut self, mut figure: WindowFigure<'_>) {
        if !self.wants(&figure.title) {
            return;
        }
        assert!(!figure.entries.is_empty(), "a figure needs a reference");
        let threads = figure.threads;
        eprintln!("windows: {} ...", figure.title);
        self.windowed = true;
        let k = figure.entries.len();
        let mut per_op = Vec::with_capacity(figure.windows);
        let mut first_per_op = Vec::with_capacity(figure.windows);
        let mut canaries = Vec::with_capacity(figure.windows);
        let mut apart = Vec::with_capacity(figure.windows);
        let (mut shortest, mut shortest_first) = (Duration::MAX, Duration::MAX);
        // Threads over the summed rates: seconds per op per thread.
        let per = |rate: f64| threads as f64 / rate;
        for rep in 0..figure.windows {
            let (mut times, mut first_times) = (vec![0.0; k], vec![0.0; k]);
            let mut alone = false;
            let mut slowest = self.note_canary(canary(threads));
            for j in 0..k {
                let i = if rep % 2 == 0 { j } else { k - 1 - j };
                let did = (figure.entries[i].1)(figure.window);
                assert_eq!(did.len(), threads, "one result per thread");
                let rate = |t: &dyn Fn(&Did) -> (u64, Duration)| -> f64 {
                    did.iter()
                        .map(t)
                        .map(|(adds, t)| adds as f64 / t.as_secs_f64())
                        .sum()
                };
                times[i] = per(rate(&|d| (d.adds, d.elapsed)));
                first_times[i] = per(rate(&|d| (WINDOW_CHUNK, d.first)));
                alone |= together(&did) < WINDOW_TOGETHER;
                for d in &did {
                    shortest = shortest.min(d.elapsed);
                    shortest_first = shortest_first.min(d.first);
                }
                slowest = slowest.max(self.note_canary(canary(threads)));
            }
            per_op.push(times);
            first_per_op.push(first_times);
            canaries.push(slowest);
            apart.push(alone);
        }
        let names: Vec<String> = figure.entries.into_iter().map(|e| e.0).collect();
        self.measured.push(Measured {
            title: format!(
                "{}: the first {WINDOW_CHUNK} adds of each thread",
                figure.title
            ),
            threads,
            ratio: Ratio::Throughput,
            names: names.clone(),
            pairs: figure.pairs.clone(),
            per_op: first_per_op,
            canary: canaries.clone(),
            apart: apart.clone(),
            shortest: shortest_first,
        });
        self.measured.push(Measured {
            title: figure.title,
            threads,
            ratio: Ratio::Throughput,
            names,
            pairs: figure.pairs,
            per_op,
            canary: canaries,
            apart,
            shortest,
        });
    }

    fn note_canary(&mut self, c: Duration) -> f64 {
        let c = c.as_secs_f64();
        self.fastest_canary = self.fastest_canary.min(c);
        c
    }

    /// Prints every figure measured. Repetitions whose canary was over 1.5x
    /// the fastest canary of the run are set aside (if that would leave
    /// none, all are used and the table says so).
    pub fn finish(self) {
        if self.measured.is_empty() {
            if let Some(o) = &self.only {
                println!(
                    "\npaired section ({}): no figure title contains {o:?}",
                    self.bench
                );
            }
            return;
        }
        println!(
            "\npaired section ({}) on {}, {} core(s): {} repetition(s) per figure{}, \
             subjects in alternating order, ratios taken within a repetition; \
             median (min..max) over the repetitions kept. Canary: {CANARY_ITERS} \
             empty iterations on each measuring core, fastest {:.2} ms; a repetition \
             is set aside when its canary is over {CANARY_LIMIT}x that.",
            self.bench,
            cpu_model(),
            cores(),
            self.reps,
            if self.windowed {
                " (windowed ones: as many windows as their tables say)"
            } else {
                ""
            },
            self.fastest_canary * 1e3,
        );
        for m in &self.measured {
            print!("{}", m.table(self.fastest_canary * CANARY_LIMIT));
        }
    }
}

/// The number of operations per thread that makes one run of `run` take
/// about `target`: runs grow fourfold until one passes [`PROBE`], which is
/// then repeated and the faster of the two scaled up. The probes double as
/// a warm-up (first-use slow paths, page faults).
fn size_run(run: &mut dyn FnMut(u64) -> Duration, target: Duration) -> u64 {
    let mut n: u64 = 1 << 14;
    loop {
        let t = run(n);
        if t >= PROBE {
            return scale(n, t.min(run(n)), target);
        }
        n = n.saturating_mul(4);
    }
}

/// The operation count that `n` operations taking `t` suggest for a run of
/// `target`; at least twice `n` when `t` fell short of it.
fn scale(n: u64, t: Duration, target: Duration) -> u64 {
    let x = target.as_secs_f64() / t.as_secs_f64().max(1e-9);
    let m = (n as f64 * x) as u64;
    if t < target {
        m.max(n.saturating_mul(2))
    } else {
        m.max(1)
    }
}

impl Measured {
    fn table(&self, canary_limit: f64) -> String {
        use std::fmt::Write;
        let reps = self.per_op.len();
        let mut kept: Vec<usize> = (0..reps)
            .filter(|&r| self.canary[r] <= canary_limit && !self.apart[r])
            .collect();
        let none_kept = kept.is_empty();
        if none_kept {
            kept = (0..reps).collect();
        }
        let ratio_of = |r: usize, a: usize, b: usize| {
            let (ta, tb) = (self.per_op[r][a], self.per_op[r][b]);
            match self.ratio {
                Ratio::Cost => ta / tb,
                Ratio::Throughput => tb / ta,
            }
        };
        let spread =
            |f: &dyn Fn(usize) -> f64| Spread::of(&kept.iter().map(|&r| f(r)).collect::<Vec<_>>());

        let mut s = String::new();
        let over = if self.threads > cores() {
            ", oversubscribed"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "\n{} [{} thread(s){over}; kept {}/{reps}{}{}; runs >= {}]",
            self.title,
            self.threads,
            if none_kept { 0 } else { kept.len() },
            match self.apart.iter().filter(|&&a| a).count() {
                0 => String::new(),
                n => format!(
                    " ({n} set aside as their threads ran together < {:.0}% of a window)",
                    WINDOW_TOGETHER * 100.0
                ),
            },
            if none_kept {
                ", all busy: every repetition used"
            } else {
                ""
            },
            short_duration(self.shortest),
        );
        let head = match self.ratio {
            Ratio::Cost => "cost vs ref",
            Ratio::Throughput => "thrpt vs ref",
        };
        let _ = writeln!(
            s,
            "  {:<34} {:>12} {:>10} {:>12}  range",
            "subject", "ns/op/thread", "Mops/s", head
        );
        for (i, name) in self.names.iter().enumerate() {
            let t = spread(&|r| self.per_op[r][i]);
            let mops = self.threads as f64 / t.median / 1e6;
            let label = if i == 0 {
                format!("{name} (ref)")
            } else {
                name.clone()
            };
            let _ = write!(s, "  {label:<34} {:>12.3} {mops:>10.1}", t.median * 1e9);
            if i == 0 {
                let _ = writeln!(s, " {:>12}", "1");
            } else {
                let x = spread(&|r| ratio_of(r, i, 0));
                let _ = writeln!(s, " {:>12.3}  {:.3}..{:.3}", x.median, x.min, x.max);
            }
        }
        let canaries: Vec<String> = self
            .canary
            .iter()
            .map(|c| format!("{:.2}", c * CANARY_LIMIT / canary_limit))
            .collect();
        let _ = writeln!(
            s,
            "  canary per repetition, x fastest: {}",
            canaries.join(" ")
        );
        for (a, b) in &self.pairs {
            let ia = self
                .names
                .iter()
                .position(|n| n == a)
                .expect("checked in compare");
            let ib = self
                .names
                .iter()
                .position(|n| n == b)
                .expect("checked in compare");
            let x = spread(&|r| ratio_of(r, ia, ib));
            let what = match self.ratio {
                Ratio::Cost => "cost",
                Ratio::Throughput => "throughput",
            };
            let _ = writeln!(
                s,
                "  {a} {what} / {b} {what}: {:.3} ({:.3}..{:.3})",
                x.median, x.min, x.max
            );
        }
        s
    }
}

/// A run's length as the tables print it: whole milliseconds for sized
/// runs, microseconds with a decimal for windows and their first chunks.
fn short_duration(t: Duration) -> String {
    if t >= Duration::from_millis(10) {
        format!("{:.0} ms", t.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} us", t.as_secs_f64() * 1e6)
    }
}

/// The CPU model from `/proc/cpuinfo` (the notes ask to name the host next
/// to every figure), or "unknown CPU".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(ratio: Ratio, per_op: Vec<Vec<f64>>, canary: Vec<f64>) -> Measured {
        Measured {
            title: "t".into(),
            threads: 1,
            ratio,
            names: vec!["ref".into(), "x".into()],
            pairs: Vec::new(),
            per_op,
            apart: vec![false; canary.len()],
            canary,
            shortest: Duration::from_millis(150),
        }
    }

    #[test]
    fn slow_canaries_set_repetitions_aside() {
        // The busy repetition (canary 2.0 against a limit of 1.5) would pull
        // the median to 3.0; kept are the two at ratio 2.0.
        let m = measured(
            Ratio::Cost,
            vec![vec![1.0, 2.0], vec![1.0, 3.0], vec![1.0, 2.0]],
            vec![1.0, 2.0, 1.1],
        );
        let t = m.table(1.5);
        assert!(t.contains("kept 2/3"), "{t}");
        assert!(t.contains(" 2.000  2.000..2.000"), "{t}");
    }

    #[test]
    fn throughput_ratios_invert_times_and_none_kept_uses_all() {
        let m = measured(Ratio::Throughput, vec![vec![1.0, 4.0]], vec![9.0]);
        let t = m.table(1.5);
        assert!(t.contains("kept 0/1, all busy"), "{t}");
        assert!(t.contains(" 0.250  0.250..0.250"), "{t}");
    }

    #[test]
    fn windows_whose_threads_ran_apart_are_set_aside() {
        let t0 = Instant::now();
        let us = Duration::from_micros;
        let did = |start: u64, elapsed: u64| Did {
            start: t0 + us(start),
            adds: WINDOW_CHUNK,
            elapsed: us(elapsed),
            first: us(1),
        };
        assert_eq!(together(&[did(0, 1000), did(0, 1000)]), 1.0);
        assert_eq!(together(&[did(0, 1000), did(500, 1000)]), 0.5);
        // The second started after the first had finished.
        assert_eq!(together(&[did(0, 1000), did(1500, 1000)]), 0.0);
        let mut m = measured(
            Ratio::Throughput,
            vec![vec![1.0, 2.0], vec![1.0, 4.0]],
            vec![1.0, 1.0],
        );
        m.apart = vec![false, true];
        let t = m.table(1.5);
        assert!(t.contains("kept 1/2 (1 set aside"), "{t}");
        assert!(t.contains(" 0.500  0.500..0.500"), "{t}");
    }

    #[test]
    fn runs_scale_to_the_target_and_at_least_double_when_short() {
        let ms = Duration::from_millis;
        assert_eq!(scale(1000, ms(20), ms(200)), 10_000);
        assert_eq!(scale(1000, ms(190), ms(200)), 2000);
        assert_eq!(scale(1000, ms(400), ms(200)), 500);
    }
}
