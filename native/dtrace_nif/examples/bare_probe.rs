//! The physical floor of the mechanism, for `make bench`: a bare hit of the
//! library's own `user_trace__i4s4` site (same registers, same note), from
//! a native program with no VM and no argument conversion.
//!
//! Prints its OS pid, waits until a tracer enables `erlang:user_trace__i4s4`
//! in this executable, then fires it `N` times (first argument, default
//! 1,000,000) and prints the mean cost per hit in nanoseconds:
//! `bare_hit_ns <value>`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use dtrace_nif::probes::bench_bare_hit;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    println!("pid {}", std::process::id());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !bench_bare_hit(-1) {
        if Instant::now() > deadline {
            eprintln!("no tracer attached within 60 s");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    for i in 0..n {
        black_box(bench_bare_hit(black_box(i as i64)));
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    println!("bare_hit_ns {ns:.1}");
}
