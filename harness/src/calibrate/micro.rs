//! Micro-benchmarks of the kernel paths the data plane and the guest use:
//! eventfd wake-ups across CPUs and on one CPU, eventfd reads, timed sleeps.

use super::error::{CalibrateError, Result};
use super::stats::median;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::clock::cycles;

/// A blocking eventfd, closed on drop.
struct Efd(File);

impl Efd {
    fn new() -> Result<Efd> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(CalibrateError::Setup {
                what: "an eventfd".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Efd(unsafe { File::from_raw_fd(fd) }))
    }

    fn signal(&self) {
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    fn wait(&self) -> u64 {
        let mut b = [0u8; 8];
        match (&self.0).read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }
}

/// Samples of one ping-pong run, in TSC cycles.
#[derive(Debug, Default)]
pub(super) struct PingPong {
    /// Duration of A's `write` that woke B.
    pub(super) write: Vec<f64>,
    /// From just before A's write to B running after its `read`.
    pub(super) wake: Vec<f64>,
    /// A's full round trip.
    pub(super) rtt: Vec<f64>,
}

pub(super) fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        if let Err(e) = vadapt_host::cputime::pin_current_thread(c) {
            tracing::warn!(cpu = c, error = %e, "cannot pin a calibration thread");
        }
    }
}

/// Thread A on `cpu_a` pings thread B on `cpu_b` through eventfds `iters` times,
/// waiting `gap` before each ping so that B (and its CPU) has been idle that long.
pub(super) fn ping_pong(
    cpu_a: Option<usize>,
    cpu_b: Option<usize>,
    iters: usize,
    gap: Option<Duration>,
) -> Result<PingPong> {
    let to_b = Arc::new(Efd::new()?);
    let to_a = Arc::new(Efd::new()?);
    let woke_at = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let b = {
        let (to_b, to_a, woke_at, stop) = (
            Arc::clone(&to_b),
            Arc::clone(&to_a),
            Arc::clone(&woke_at),
            Arc::clone(&stop),
        );
        std::thread::Builder::new()
            .name("calib-pong".into())
            .spawn(move || {
                pin(cpu_b);
                loop {
                    to_b.wait();
                    woke_at.store(cycles(), Ordering::Release);
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    to_a.signal();
                }
            })
            .map_err(|source| CalibrateError::Setup {
                what: "a ping-pong thread".into(),
                source,
            })?
    };
    let a = std::thread::Builder::new()
        .name("calib-ping".into())
        .spawn(move || {
            pin(cpu_a);
            let warm = iters / 10 + 5;
            let mut out = PingPong::default();
            for i in 0..iters + warm {
                if let Some(g) = gap {
                    idle_for(g);
                }
                let t0 = cycles();
                to_b.signal();
                let t1 = cycles();
                to_a.wait();
                let t2 = cycles();
                let tw = woke_at.load(Ordering::Acquire);
                if i >= warm {
                    out.write.push(t1.wrapping_sub(t0) as f64);
                    out.rtt.push(t2.wrapping_sub(t0) as f64);
                    // A TSC that is not shared between CPUs shows up as a negative or
                    // longer-than-the-round-trip wake-up: dropped, RTT/2 used instead.
                    if tw > t0 && tw < t2 {
                        out.wake.push((tw - t0) as f64);
                    }
                }
            }
            stop.store(true, Ordering::Release);
            to_b.signal();
            out
        })
        .map_err(|source| CalibrateError::Setup {
            what: "a ping-pong thread".into(),
            source,
        })?;
    let out = a.join().map_err(|_| CalibrateError::Measure {
        what: "ping-pong",
        reason: "the ping thread panicked".into(),
    })?;
    let _ = b.join();
    Ok(out)
}

/// Let `g` pass: spin below 100 µs (a sleep would overshoot by its timer slack), else sleep.
/// Only the other thread's CPU has to go idle, so spinning here is harmless.
fn idle_for(g: Duration) {
    if g < Duration::from_micros(100) {
        let t = Instant::now();
        while t.elapsed() < g {
            std::hint::spin_loop();
        }
    } else {
        std::thread::sleep(g);
    }
}

/// Median cycles of writing an eventfd nobody waits on, and of reading it back
/// once signalled (the guest taking a call).
pub(super) fn write_read_signalled(n: usize) -> Result<(f64, f64)> {
    let e = Efd::new()?;
    let (mut w, mut r) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t0 = cycles();
        e.signal();
        let t1 = cycles();
        e.wait();
        r.push(cycles().wrapping_sub(t1) as f64);
        w.push(t1.wrapping_sub(t0) as f64);
    }
    Ok((median(&mut w), median(&mut r)))
}

/// Median lateness of a 200 µs `clock_nanosleep` with 1 ns timer slack, ns.
pub(super) fn nanosleep_overshoot(n: usize) -> Result<f64> {
    std::thread::Builder::new()
        .name("calib-sleep".into())
        .spawn(move || {
            // SAFETY: PR_SET_TIMERSLACK takes an integer argument, no pointers.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
            let want = Duration::from_micros(200);
            let mut v: Vec<f64> = (0..n)
                .map(|_| {
                    let t = Instant::now();
                    std::thread::sleep(want);
                    t.elapsed().saturating_sub(want).as_nanos() as f64
                })
                .collect();
            median(&mut v)
        })
        .map_err(|source| CalibrateError::Setup {
            what: "a sleeping thread".into(),
            source,
        })?
        .join()
        .map_err(|_| CalibrateError::Measure {
            what: "timer overshoot",
            reason: "the sleeping thread panicked".into(),
        })
}
