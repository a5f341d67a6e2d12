//! CPU time of threads and of the process, and pinning threads to cores.
//!
//! Three ways to read a thread's CPU time, from most to least precise:
//!
//! - [`current_thread_cpu_time`]: the calling thread, nanoseconds
//!   (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
//! - [`ThreadClock`]: a thread of this process read from any other thread,
//!   nanoseconds. The thread captures its clock once
//!   ([`ThreadClock::current`], `pthread_getcpuclockid`) and hands it to the
//!   metrics code, which reads it for `vadapt_worker_cpu_seconds_total`.
//! - [`schedstat_cpu_time`]: a thread of this process by its tid, from any
//!   thread, nanoseconds (`/proc/self/task/<tid>/schedstat`, first field):
//!   the daemon's queue workers, whose tid the metrics code keeps.
//! - [`task_cpu_time`] / [`thread_cpu_time`]: any thread of any process
//!   (QEMU's vCPU threads, vSPACE), from `/proc/<pid>/task/<tid>/stat`
//!   (`utime + stime`, in clock ticks, usually 10 ms).
//!
//! [`pin_current_thread`] sets the calling thread's affinity to one core
//! (`sched_setaffinity`); [`current_tid`] and [`set_timer_slack`] are the
//! other per-thread calls the workers make.
//!
//! This is the crate's only module with `unsafe`: libc calls whose arguments
//! are plain integers or pointers to locals, each explained where it is made.
#![allow(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Reading CPU time or setting affinity failed.
#[derive(Debug, thiserror::Error)]
pub enum CpuTimeError {
    /// `clock_gettime` or `pthread_getcpuclockid` failed (e.g. the thread has exited).
    #[error("failed to read a CPU-time clock")]
    Clock(#[source] io::Error),
    /// The stat file could not be read (e.g. the thread has exited).
    #[error("failed to read {path}")]
    ReadStat {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The stat file did not have the expected fields.
    #[error("failed to parse utime/stime in {path}")]
    ParseStat {
        /// The file.
        path: PathBuf,
    },
    /// `sched_setaffinity` / `sched_getaffinity` failed.
    #[error("failed to set or get the CPU affinity")]
    Affinity(#[source] io::Error),
    /// `prctl(PR_SET_TIMERSLACK)` failed.
    #[error("failed to set the timer slack")]
    TimerSlack(#[source] io::Error),
    /// The core number does not fit a `cpu_set_t`.
    #[error("CPU {0} is beyond CPU_SETSIZE")]
    CpuOutOfRange(usize),
}

fn read_clock(clock: libc::clockid_t) -> Result<Duration, CpuTimeError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec on our stack; clock_gettime
    // writes only into it and reports a bad clock id as an error.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Err(CpuTimeError::Clock(io::Error::last_os_error()));
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// CPU time (user + system) used so far by the calling thread.
pub fn current_thread_cpu_time() -> Result<Duration, CpuTimeError> {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time (user + system) used so far by the whole process.
pub fn process_cpu_time() -> Result<Duration, CpuTimeError> {
    read_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU-time clock of one thread of this process, readable from any
/// thread while that thread lives (reads fail once it has exited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadClock {
    clock: libc::clockid_t,
}

impl ThreadClock {
    /// The calling thread's clock.
    pub fn current() -> Result<ThreadClock, CpuTimeError> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self() is always a valid handle for the calling
        // thread, and `clock` is a writable local.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
        if rc != 0 {
            return Err(CpuTimeError::Clock(io::Error::from_raw_os_error(rc)));
        }
        Ok(ThreadClock { clock })
    }

    /// CPU time the thread has used so far.
    pub fn read(&self) -> Result<Duration, CpuTimeError> {
        read_clock(self.clock)
    }
}

/// The calling thread's kernel thread id (what `/proc/self/task/` lists).
pub fn current_tid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    tid as u32
}

/// CPU time used by thread `tid` of this process, nanoseconds, from
/// `/proc/self/task/<tid>/schedstat` (its first field: time on a CPU).
pub fn schedstat_cpu_time(tid: u32) -> Result<Duration, CpuTimeError> {
    let path = PathBuf::from(format!("/proc/self/task/{tid}/schedstat"));
    let text = std::fs::read_to_string(&path).map_err(|source| CpuTimeError::ReadStat {
        path: path.clone(),
        source,
    })?;
    parse_schedstat_ns(&text)
        .map(Duration::from_nanos)
        .ok_or(CpuTimeError::ParseStat { path })
}

/// The on-CPU nanoseconds of a `schedstat` line (`on_cpu_ns wait_ns slices`).
pub fn parse_schedstat_ns(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Set the calling thread's timer slack (`PR_SET_TIMERSLACK`), ns. The
/// default 50 µs would turn a 100 µs polling interval into 150 µs.
pub fn set_timer_slack(ns: u64) -> Result<(), CpuTimeError> {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument, no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0u64, 0u64, 0u64) };
    if rc != 0 {
        return Err(CpuTimeError::TimerSlack(io::Error::last_os_error()));
    }
    Ok(())
}

/// Clock ticks per second of `/proc` times (`sysconf(_SC_CLK_TCK)`, usually 100).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes an integer name and returns an integer.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// `(utime, stime)` in clock ticks from the contents of a `/proc/.../stat`
/// file. The command name (field 2) may hold spaces and parentheses
/// (`(CPU 0/KVM)`), so fields are counted after its *last* `)`.
pub fn parse_stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, utime field 14, stime field 15.
    let mut fields = rest.split_whitespace().skip(11);
    let utime = fields.next()?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// CPU time used by thread `tid` of process `pid`, from
/// `<proc_root>/<pid>/task/<tid>/stat` (clock-tick resolution).
pub fn task_cpu_time(proc_root: &Path, pid: u32, tid: u32) -> Result<Duration, CpuTimeError> {
    let path = proc_root
        .join(pid.to_string())
        .join("task")
        .join(tid.to_string())
        .join("stat");
    stat_cpu_time(path)
}

/// CPU time used by thread `tid` of this process, from
/// `/proc/self/task/<tid>/stat` (clock-tick resolution).
pub fn thread_cpu_time(tid: u32) -> Result<Duration, CpuTimeError> {
    stat_cpu_time(PathBuf::from(format!("/proc/self/task/{tid}/stat")))
}

fn stat_cpu_time(path: PathBuf) -> Result<Duration, CpuTimeError> {
    let stat = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(source) => return Err(CpuTimeError::ReadStat { path, source }),
    };
    let Some((utime, stime)) = parse_stat_ticks(&stat) else {
        return Err(CpuTimeError::ParseStat { path });
    };
    let ticks = u128::from(utime + stime);
    let hz = u128::from(clock_ticks_per_second());
    Ok(Duration::from_nanos((ticks * 1_000_000_000 / hz) as u64))
}

/// Pin the calling thread to core `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), CpuTimeError> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(CpuTimeError::CpuOutOfRange(cpu));
    }
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (checked above), so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 means the calling thread; `set` is a valid cpu_set_t of
    // the size we pass, only read by the kernel.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(CpuTimeError::Affinity(io::Error::last_os_error()));
    }
    Ok(())
}

/// The cores the calling thread may run on.
pub fn current_affinity() -> Result<Vec<usize>, CpuTimeError> {
    // SAFETY: as in `pin_current_thread`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 means the calling thread; the kernel writes at most
    // `size_of::<cpu_set_t>()` bytes into `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(CpuTimeError::Affinity(io::Error::last_os_error()));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE, so the bit read is inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    /// Spin until the calling thread's CPU clock has advanced (no timing assumption).
    fn burn() {
        let start = current_thread_cpu_time().unwrap();
        let mut x = 0u64;
        while current_thread_cpu_time().unwrap() == start {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn schedstat_gives_this_threads_cpu_in_ns() {
        assert_eq!(parse_schedstat_ns("123456789 42 7\n"), Some(123_456_789));
        assert_eq!(parse_schedstat_ns(""), None);
        let tid = current_tid();
        let t0 = schedstat_cpu_time(tid).unwrap();
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        assert!(schedstat_cpu_time(tid).unwrap() > t0);
        assert!(schedstat_cpu_time(u32::MAX).is_err());
        set_timer_slack(1).unwrap();
    }

    #[test]
    fn clocks_advance_with_work() {
        let t0 = current_thread_cpu_time().unwrap();
        let p0 = process_cpu_time().unwrap();
        burn();
        let t1 = current_thread_cpu_time().unwrap();
        let p1 = process_cpu_time().unwrap();
        assert!(t1 > t0);
        assert!(p1 > p0);
        // The process has used at least what this thread has.
        assert!(p1 >= t1 - t0);
    }

    #[test]
    fn thread_clock_is_read_from_another_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            burn();
            let own = current_thread_cpu_time().unwrap();
            tx.send((ThreadClock::current().unwrap(), own, current_tid()))
                .unwrap();
            done_rx.recv().unwrap();
        });
        let (clock, own, tid) = rx.recv().unwrap();
        // Read while the worker lives: at least what it saw itself.
        assert!(clock.read().unwrap() >= own);
        // /proc agrees to within its tick resolution.
        let ticks = thread_cpu_time(tid).unwrap();
        let tick = Duration::from_nanos(1_000_000_000 / clock_ticks_per_second());
        assert!(ticks <= clock.read().unwrap() + tick);
        done_tx.send(()).unwrap();
        worker.join().unwrap();
    }

    #[test]
    fn parses_stat_lines_with_awkward_names() {
        let line =
            "4242 (CPU 0/KVM) S 1 4242 4242 0 -1 4194368 1 0 0 0 123 45 0 0 20 0 1 0 100 0 0";
        assert_eq!(parse_stat_ticks(line), Some((123, 45)));
        let line = "7 (a) b)) R 1 2 3 4 5 6 7 8 9 10 11 12 13";
        assert_eq!(parse_stat_ticks(line), Some((11, 12)));
        assert_eq!(parse_stat_ticks("1 (x) S 1 2"), None);
        assert_eq!(parse_stat_ticks("no parens"), None);
    }

    #[test]
    fn task_cpu_time_reads_a_fake_proc() {
        let t = TestDir::new("proc");
        let hz = clock_ticks_per_second();
        t.write(
            "77/task/78/stat",
            &format!(
                "78 (CPU 1/KVM) R 1 1 1 0 -1 0 0 0 0 0 {} {} 0 0",
                2 * hz,
                hz
            ),
        );
        assert_eq!(task_cpu_time(&t.0, 77, 78).unwrap(), Duration::from_secs(3));
        assert!(matches!(
            task_cpu_time(&t.0, 77, 79),
            Err(CpuTimeError::ReadStat { .. })
        ));
        t.write("77/task/80/stat", "80 (x) R 1");
        assert!(matches!(
            task_cpu_time(&t.0, 77, 80),
            Err(CpuTimeError::ParseStat { .. })
        ));
    }

    #[test]
    fn pins_a_thread_to_one_core() {
        let allowed = current_affinity().unwrap();
        assert!(!allowed.is_empty());
        let cpu = *allowed.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            assert_eq!(current_affinity().unwrap(), vec![cpu]);
        })
        .join()
        .unwrap();
        assert!(matches!(
            pin_current_thread(1 << 20),
            Err(CpuTimeError::CpuOutOfRange(_))
        ));
    }
}
