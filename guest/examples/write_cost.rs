//! Calibration of `--write-cost-ns` and `--write-cost-ns-per-kib`: what one `send()` of a
//! netperf `TCP_STREAM` message costs the sending thread on this machine's kernel.
//!
//! ```text
//! nice -n 19 cargo run --release -p vadapt-guest --example write_cost
//! nice -n 19 cargo run --release -p vadapt-guest --example write_cost -- 64 1024 16384
//! ```
//!
//! For each message size (default 64 and 1024 bytes) and each of [`RUNS`] runs: a fresh
//! loopback TCP connection, a reader thread draining the other end into a 64 KiB buffer, and
//! a sender doing [`WARMUP`] writes and then [`WRITES`] timed `send()`s of the same buffer,
//! as netperf does (blocking socket, `TCP_NODELAY` off — netperf's default —, default buffer
//! sizes). The sender's CPU time (`CLOCK_THREAD_CPUTIME_ID`) divided by the writes is the
//! cost per write: it counts what the kernel does in the sender's context (syscall, copy into
//! the skb, TCP bookkeeping, and the transmissions and ACK processing that run there) and not
//! the time the sender sleeps on a full socket buffer. Wall time per write is printed beside
//! it. The median over the runs is reported, with the range.
//!
//! What it does not measure: on loopback, the receive side's softirq also runs in the
//! sender's context (that inflates the figure), while no device is involved (a virtio device
//! adds the driver's work and VM exits, which the synthetic guest models on its own). Inside
//! a VM the guest kernel pays this plus its exits; run this on the machine you calibrate for.
//!
//! The last lines fit `cost(size) = base + per_kib × size / 1024` through the smallest and
//! the largest size: the two defaults of the synthetic guest's write cost.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use vadapt_guest::clock::thread_cpu_ns;

/// Timed runs per size (a fresh connection each); the median is reported.
const RUNS: usize = 7;
/// Writes before the timing starts (slow start, buffer autotuning, page faults).
const WARMUP: u64 = 20_000;
/// Timed writes per run.
const WRITES: u64 = 200_000;

/// One run's cost per write (ns): sender CPU time and wall time.
#[derive(Debug, Clone, Copy)]
struct Sample {
    cpu_ns: f64,
    wall_ns: f64,
}

fn run_once(size: usize) -> std::io::Result<Sample> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut conn, _) = listener.accept()?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            match conn.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let mut tx = TcpStream::connect(addr)?;
    tx.set_nodelay(false)?;
    let msg = vec![0x5au8; size];
    for _ in 0..WARMUP {
        tx.write_all(&msg)?;
    }
    let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
    for _ in 0..WRITES {
        tx.write_all(&msg)?;
    }
    let (cpu, wall) = (thread_cpu_ns() - cpu0, wall0.elapsed());
    drop(tx);
    let received = reader
        .join()
        .map_err(|_| std::io::Error::other("reader thread panicked"))??;
    if received != (WARMUP + WRITES) * size as u64 {
        return Err(std::io::Error::other(format!(
            "reader got {received} bytes, expected {}",
            (WARMUP + WRITES) * size as u64
        )));
    }
    Ok(Sample {
        cpu_ns: cpu as f64 / WRITES as f64,
        wall_ns: wall.as_nanos() as f64 / WRITES as f64,
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::process::ExitCode {
    let mut sizes: Vec<usize> = Vec::new();
    for a in std::env::args().skip(1) {
        match a.parse::<usize>() {
            Ok(s) if (1..=1 << 20).contains(&s) => sizes.push(s),
            _ => {
                eprintln!("error: `{a}` is not a message size in 1..=1048576 bytes");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    if sizes.is_empty() {
        sizes = vec![64, 1024];
    }
    sizes.sort_unstable();
    println!(
        "send() cost per write, loopback TCP, Nagle on, {RUNS} runs × {WRITES} writes (median [min..max])"
    );
    println!(
        "{:>8}  {:>24}  {:>24}",
        "size B", "sender CPU ns/write", "wall ns/write"
    );
    let mut medians = Vec::new();
    for &size in &sizes {
        let mut cpu = Vec::new();
        let mut wall = Vec::new();
        for _ in 0..RUNS {
            match run_once(size) {
                Ok(s) => {
                    cpu.push(s.cpu_ns);
                    wall.push(s.wall_ns);
                }
                Err(e) => {
                    eprintln!("error: size {size}: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        let (c, w) = (median(&mut cpu), median(&mut wall));
        println!(
            "{size:>8}  {c:>8.0} [{:>6.0}..{:>6.0}]  {w:>8.0} [{:>6.0}..{:>6.0}]",
            cpu[0],
            cpu[RUNS - 1],
            wall[0],
            wall[RUNS - 1]
        );
        medians.push((size, c));
    }
    if let (Some(&(s0, c0)), Some(&(s1, c1))) = (medians.first(), medians.last()) {
        if s1 > s0 {
            let per_kib = (c1 - c0) / ((s1 - s0) as f64 / 1024.0);
            let base = c0 - per_kib * s0 as f64 / 1024.0;
            println!(
                "fit through {s0} and {s1} B: --write-cost-ns {base:.0} --write-cost-ns-per-kib {per_kib:.0}"
            );
        }
    }
    std::process::ExitCode::SUCCESS
}
