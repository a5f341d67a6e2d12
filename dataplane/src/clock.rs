//! A cheap monotonic clock for the per-pass `now` the policies need.
//!
//! A busy-polling worker runs millions of passes a second; `clock_gettime`
//! through the vDSO still cost over a quarter of a pass in profiles on these
//! machines. Where the CPU has an invariant TSC (`constant_tsc` and
//! `nonstop_tsc`), [`PassClock`] reads the TSC and converts with a factor
//! calibrated against `CLOCK_MONOTONIC`, re-anchoring once a second so it
//! cannot drift from the system clock. Elsewhere it simply calls
//! `clock_gettime`. Sleeps and timeouts never use it: they read
//! `CLOCK_MONOTONIC` themselves.

use vadapt_policy::Instant;

/// Wall-clock time since the Unix epoch (zero if the clock is before it):
/// for timestamps people and tools read (a capture's packets), never for
/// intervals.
pub fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Monotonic clock, ns (`CLOCK_MONOTONIC`).
pub fn monotonic_now() -> Instant {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// Clock `id` (a monotonic one), ns.
#[inline]
fn read_clock(id: libc::clockid_t) -> Instant {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Instant(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Monotonic clock at the kernel tick's resolution, ns
/// (`CLOCK_MONOTONIC_COARSE`: the vDSO reads the time of the last tick, no
/// TSC read; 4.4 ns against `CLOCK_MONOTONIC`'s 23.9 on these VMs,
/// `examples/clock_cost.rs`). For times
/// that need seconds, not nanoseconds, read per batch on the fast path:
/// the switch's learning and ageing.
pub fn coarse_now() -> Instant {
    read_clock(libc::CLOCK_MONOTONIC_COARSE)
}

/// TSC (x86-64) or nanoseconds elsewhere.
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no memory effects and exists on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_now().0
    }
}

/// True when `/proc/cpuinfo` promises an invariant TSC.
pub fn invariant_tsc() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| {
            s.lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.contains(" constant_tsc") && l.contains(" nonstop_tsc"))
        })
}

/// TSC frequency in cycles per ns, measured over `ms` milliseconds.
pub fn calibrate_tsc(ms: u64) -> f64 {
    let (t0, c0) = (monotonic_now(), cycles());
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let (t1, c1) = (monotonic_now(), cycles());
    (c1.wrapping_sub(c0)) as f64 / (t1.0 - t0.0).max(1) as f64
}

/// Per-thread clock; see the module docs.
#[derive(Debug, Clone)]
pub struct PassClock {
    /// Nanoseconds per TSC cycle, 0 when the TSC is not used.
    ns_per_cycle: f64,
    anchor_ns: u64,
    anchor_cycles: u64,
    reanchor_cycles: u64,
    last: u64,
}

impl PassClock {
    /// A clock using the TSC at `cycles_per_ns` (from [`calibrate_tsc`]), or
    /// `clock_gettime` when `None`.
    pub fn new(cycles_per_ns: Option<f64>) -> Self {
        let mut c = PassClock {
            ns_per_cycle: cycles_per_ns.filter(|f| *f > 0.0).map_or(0.0, |f| 1.0 / f),
            anchor_ns: 0,
            anchor_cycles: 0,
            reanchor_cycles: 0,
            last: 0,
        };
        c.anchor();
        c
    }

    fn anchor(&mut self) {
        self.anchor_ns = monotonic_now().0;
        self.anchor_cycles = cycles();
        self.reanchor_cycles = if self.ns_per_cycle > 0.0 {
            (1e9 / self.ns_per_cycle) as u64
        } else {
            0
        };
    }

    /// Now, ns, never going backwards.
    #[inline]
    pub fn now(&mut self) -> Instant {
        if self.ns_per_cycle == 0.0 {
            return monotonic_now();
        }
        let mut dc = cycles().wrapping_sub(self.anchor_cycles);
        if dc > self.reanchor_cycles {
            self.anchor();
            dc = 0;
        }
        let t = self.anchor_ns + (dc as f64 * self.ns_per_cycle) as u64;
        self.last = self.last.max(t);
        Instant(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_trails_the_precise_one_by_at_most_a_few_ticks() {
        for _ in 0..1000 {
            let coarse = coarse_now();
            let precise = monotonic_now();
            assert!(coarse <= precise, "{coarse:?} ahead of {precise:?}");
            assert!(precise.saturating_since(coarse).as_nanos() < 50_000_000);
        }
    }

    #[test]
    fn pass_clock_tracks_the_system_clock() {
        let f = if invariant_tsc() {
            Some(calibrate_tsc(20))
        } else {
            None
        };
        let mut c = PassClock::new(f);
        let a = c.now();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = c.now();
        let sys = monotonic_now();
        assert!(b > a);
        let elapsed = b.0 - a.0;
        // Loose bounds: the point is "same clock", not timing precision.
        assert!(elapsed >= 25_000_000, "{elapsed}");
        assert!(
            sys.0 + 5_000_000 >= b.0,
            "TSC clock ran ahead of CLOCK_MONOTONIC"
        );
    }

    #[test]
    fn fallback_clock_is_monotonic() {
        let mut c = PassClock::new(None);
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
