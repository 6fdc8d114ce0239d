//! A program that counts through the `metrics` facade with shardcount's
//! layer under the Prometheus exporter, and serves `/metrics` for scraping.
//!
//! ```sh
//! cargo run --release --features metrics --example metrics_server -- --port 9000
//! curl -s http://127.0.0.1:9000/metrics | grep shardcount_demo
//! ```
//!
//! The first line on stdout is the address `/metrics` is served on
//! (`127.0.0.1:PORT`; `--port 0`, the default, picks a free port). Worker
//! threads count through `counter!`: one labelled series per worker, looked
//! up on every call, and one series all share, through a handle registered
//! once. With `--per-worker N` each worker stops after N increments; the
//! program then flushes the layer and prints `done` as its second line, and
//! from then on a scrape shows exactly N per worker. It runs until killed,
//! or until `--seconds` have passed.

use clap::Parser;
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder};
use shardcount::integrations::metrics::ShardedLayer;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Counts through `metrics` with shardcount's layer and serves /metrics")]
struct Args {
    /// Port on 127.0.0.1 to serve /metrics on; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Exit after this many seconds (default: run until killed).
    #[arg(long)]
    seconds: Option<u64>,
    /// Worker threads counting.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Each worker stops after this many increments (default: never).
    #[arg(long)]
    per_worker: Option<u64>,
}

/// Builds the exporter listening on `127.0.0.1:port`. The exporter does not
/// report the port it bound, so for port 0 a free port is found first by
/// binding and releasing it; if another process takes it in between, try
/// another.
fn exporter(
    port: u16,
) -> (
    metrics_exporter_prometheus::PrometheusRecorder,
    metrics_exporter_prometheus::ExporterFuture,
    SocketAddr,
    tokio::runtime::Runtime,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for the exporter");
    for attempt in 0.. {
        let addr = if port == 0 {
            TcpListener::bind(("127.0.0.1", 0))
                .and_then(|l| l.local_addr())
                .expect("a free port on 127.0.0.1")
        } else {
            SocketAddr::from(([127, 0, 0, 1], port))
        };
        // `build` starts the exporter's upkeep task on the current runtime.
        let built = {
            let _in_runtime = runtime.enter();
            PrometheusBuilder::new().with_http_listener(addr).build()
        };
        match built {
            Ok((recorder, serve)) => return (recorder, serve, addr, runtime),
            Err(BuildError::FailedToCreateHTTPListener(e)) if port == 0 && attempt < 10 => {
                eprintln!("metrics_server: {addr} was taken ({e}); trying another port");
            }
            Err(e) => {
                eprintln!("metrics_server: cannot serve on {addr}: {e}");
                std::process::exit(1);
            }
        }
    }
    unreachable!()
}

const WORKERS: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];

fn main() {
    let args = Args::parse();
    assert!(
        (1..=WORKERS.len()).contains(&args.threads),
        "--threads must be 1..={}",
        WORKERS.len()
    );

    let (prometheus, serve, addr, runtime) = exporter(args.port);
    std::thread::Builder::new()
        .name("exporter".into())
        .spawn(move || runtime.block_on(serve))
        .expect("the exporter thread");

    // The one line an existing program adds: the layer over its recorder.
    let recorder = ShardedLayer::new().wrap(prometheus);
    let flush = recorder.flush_handle();
    metrics::set_global_recorder(recorder).expect("no other global recorder");
    metrics::describe_counter!(
        "shardcount_demo_requests_total",
        "Increments per worker, looked up through counter! on every call"
    );
    metrics::describe_counter!(
        "shardcount_demo_shared_total",
        "Increments from every worker through one registered handle"
    );

    println!("{addr}");
    std::io::stdout().flush().expect("stdout");

    let stop = AtomicBool::new(false);
    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    std::thread::scope(|s| {
        let workers: Vec<_> = WORKERS[..args.threads]
            .iter()
            .map(|&worker| {
                let stop = &stop;
                s.spawn(move || {
                    let shared = metrics::counter!("shardcount_demo_shared_total");
                    let limit = args.per_worker.unwrap_or(u64::MAX);
                    let mut done = 0;
                    // Relaxed: a stop hint; the counts are flushed after join.
                    while done < limit && !stop.load(Ordering::Relaxed) {
                        metrics::counter!("shardcount_demo_requests_total", "worker" => worker)
                            .increment(1);
                        shared.increment(1);
                        done += 1;
                    }
                })
            })
            .collect();
        if args.per_worker.is_some() {
            for w in workers {
                w.join().expect("worker");
            }
            flush.flush();
            println!("done");
            std::io::stdout().flush().expect("stdout");
        }
        match deadline {
            Some(d) => std::thread::sleep(d.saturating_duration_since(Instant::now())),
            None => loop {
                std::thread::park();
            },
        }
        stop.store(true, Ordering::Relaxed);
    });
    flush.flush();
}
