//! The physical floor of the mechanism, for `make bench`: a bare SDT probe
//! hit with user_trace__i4s4's ten-argument layout, from a native program
//! with no VM and no argument conversion.
//!
//! Prints its OS pid, waits until a tracer enables probe
//! `dtrace_bench:bare_hit`, then fires it `N` times (first argument, default
//! 1,000,000) and prints the mean cost per hit in nanoseconds:
//! `bare_hit_ns <value>`.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn hit(i: isize) -> bool {
    let s = c"s".as_ptr() as isize;
    probe::probe_lazy!(dtrace_bench, bare_hit, s, s, i, 2, 3, 4, s, s, 0, 0)
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    println!("pid {}", std::process::id());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !hit(-1) {
        if Instant::now() > deadline {
            eprintln!("no tracer attached within 60 s");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    for i in 0..n {
        black_box(hit(black_box(i as isize)));
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    println!("bare_hit_ns {ns:.1}");
}
