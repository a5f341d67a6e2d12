//! How busy vSPACE's threads were over a period: CPU time (in cores) and
//! run-queue delay, per thread and summed per [`ThreadGroup`].
//!
//! The source is `<proc>/<pid>/task/<tid>/schedstat`, three counters since
//! the thread started ([`Schedstat`]): nanoseconds on a CPU, nanoseconds
//! runnable but waiting on a run queue, and timeslices run. Nanoseconds
//! matter here: `stat`'s clock ticks (10 ms) are a tenth of vSPACE's 100 ms
//! period.
//!
//! The daemon takes a [`LoadSnapshot`] each period and compares it with the
//! previous one ([`LoadSnapshot::since`]):
//!
//! ```text
//!   prev = LoadSnapshot::take(proc, &threads, Instant::now())
//!   every period:
//!       now  = LoadSnapshot::take(proc, &threads, Instant::now())
//!       load = now.since(&prev)?          per thread and per group
//!       manager.on_period(PeriodMeasurement { load: load.group_load(), .. })
//!       prev = now
//! ```
//!
//! A thread that exits is normal (a VM shuts down, a worker is restarted):
//! it is [`ThreadPeriod::Gone`], not an error, and the period goes on with
//! the others. Its CPU time between the previous snapshot and its exit is
//! lost, so its group reads a little low for that one period. A thread with
//! no usable previous reading is [`ThreadPeriod::New`] and adds nothing to
//! its group: new in the list, gone or unreadable before, or counters that
//! went backwards (its tid was reused by a new thread).
//!
//! Utilisation can exceed 1.0 per thread by a hair: the files are read one
//! after the other, a little after the instant the caller passes.

use crate::error_chain::error_chain;
use crate::thread_group::{GroupThread, TaskId, ThreadGroup};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vadapt_policy::vspace::GroupLoad;

/// A thread's scheduler counters since it started (`schedstat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedstat {
    /// Time spent on a CPU, ns.
    pub run_ns: u64,
    /// Time spent runnable on a run queue, waiting for a CPU, ns.
    pub wait_ns: u64,
    /// Timeslices run on a CPU.
    pub timeslices: u64,
}

impl Schedstat {
    /// The counters of a `schedstat` file (`run_ns wait_ns timeslices`).
    pub fn parse(text: &str) -> Option<Schedstat> {
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
        Some(Schedstat {
            run_ns: fields.next()??,
            wait_ns: fields.next()??,
            timeslices: fields.next()??,
        })
    }
}

/// Reading a thread's load failed.
#[derive(Debug, thiserror::Error)]
pub enum ThreadLoadError {
    /// The schedstat file could not be read (for a reason other than the
    /// thread having exited).
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The task exists but has no schedstat file (a kernel without
    /// `CONFIG_SCHED_INFO`).
    #[error("{path} does not exist although the thread does")]
    NoSchedstat {
        /// The file.
        path: PathBuf,
    },
    /// The schedstat file did not hold three counters.
    #[error("failed to parse {path}: {text:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held, cut to 100 bytes.
        text: String,
    },
    /// The two snapshots compared were not taken one after the other.
    #[error("the snapshot is not later than the previous one")]
    NotLater,
}

/// True for the errors a read of an exited thread's `/proc` file gives:
/// `ENOENT` (its directory is gone) and `ESRCH` (it exited while open).
fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// The counters of thread `task`, from `<proc_root>/<pid>/task/<tid>/schedstat`;
/// `Ok(None)` if the thread has exited.
pub fn read_schedstat(
    proc_root: &Path,
    task: TaskId,
) -> Result<Option<Schedstat>, ThreadLoadError> {
    let dir = proc_root
        .join(task.pid.to_string())
        .join("task")
        .join(task.tid.to_string());
    let path = dir.join("schedstat");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && dir.is_dir() => {
            return Err(ThreadLoadError::NoSchedstat { path });
        }
        Err(e) if is_gone(&e) => return Ok(None),
        Err(source) => return Err(ThreadLoadError::Read { path, source }),
    };
    match Schedstat::parse(&text) {
        Some(s) => Ok(Some(s)),
        None => Err(ThreadLoadError::Parse {
            path,
            text: text.chars().take(100).collect(),
        }),
    }
}

/// What one thread's file said at a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reading {
    Counters(Schedstat),
    Gone,
    Failed(String),
}

/// The counters of a list of threads at one instant. See the module
/// documentation.
#[derive(Clone, Debug)]
pub struct LoadSnapshot {
    at: Instant,
    threads: Vec<(GroupThread, Reading)>,
}

/// One thread's load over a period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThreadLoad {
    /// CPU time over the period divided by its length, in cores (0.25 = a
    /// quarter of one core).
    pub util: f64,
    /// Time spent runnable but waiting for a CPU during the period.
    pub run_delay: Duration,
    /// Timeslices run during the period.
    pub timeslices: u64,
}

/// What became of one thread over a period.
#[derive(Clone, Debug, PartialEq)]
pub enum ThreadPeriod {
    /// Measured.
    Measured(ThreadLoad),
    /// No usable previous reading (see the module documentation); measured
    /// from the next period on.
    New,
    /// The thread has exited.
    Gone,
    /// Its file could not be read or parsed; the reason, for a log line.
    Unreadable {
        /// Why.
        reason: String,
    },
}

/// One thread's result for a period.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadReport {
    /// The thread and its group.
    pub thread: GroupThread,
    /// What became of it.
    pub period: ThreadPeriod,
}

/// A group's load over a period: the sum over its measured threads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupTotal {
    /// CPU time, in cores.
    pub util: f64,
    /// Run-queue delay of its threads, summed.
    pub run_delay: Duration,
    /// Threads measured (those [`ThreadPeriod::Measured`]).
    pub measured: usize,
}

/// The load of a period, per thread and per group.
#[derive(Clone, Debug, PartialEq)]
pub struct PeriodLoad {
    /// The period's length (between the two snapshots' instants).
    pub period: Duration,
    /// One entry per thread of the newer snapshot, in its order.
    pub threads: Vec<ThreadReport>,
    /// The vCPU group.
    pub vcpu: GroupTotal,
    /// The NQ group.
    pub nq: GroupTotal,
    /// The best-effort group.
    pub be: GroupTotal,
}

impl PeriodLoad {
    /// The total of `group`.
    pub fn group(&self, group: ThreadGroup) -> &GroupTotal {
        match group {
            ThreadGroup::Vcpu => &self.vcpu,
            ThreadGroup::Nq => &self.nq,
            ThreadGroup::Be => &self.be,
        }
    }

    /// What [`VspaceManager::on_period`](vadapt_policy::vspace::VspaceManager::on_period)
    /// takes: the vCPU and NQ groups' utilisation.
    pub fn group_load(&self) -> GroupLoad {
        GroupLoad {
            vcpu_util: self.vcpu.util,
            nq_util: self.nq.util,
        }
    }

    /// Threads found to have exited.
    pub fn gone(&self) -> impl Iterator<Item = &GroupThread> {
        self.threads
            .iter()
            .filter(|r| r.period == ThreadPeriod::Gone)
            .map(|r| &r.thread)
    }
}

impl LoadSnapshot {
    /// Read the counters of `threads` under `proc_root` (normally `/proc`);
    /// `at` is the instant the caller attributes to the readings (take it
    /// just before calling). Never fails: a thread's failure is kept and
    /// reported by [`LoadSnapshot::since`].
    pub fn take(proc_root: &Path, threads: &[GroupThread], at: Instant) -> LoadSnapshot {
        let threads = threads
            .iter()
            .map(|&t| {
                let reading = match read_schedstat(proc_root, t.task) {
                    Ok(Some(s)) => Reading::Counters(s),
                    Ok(None) => Reading::Gone,
                    Err(e) => Reading::Failed(error_chain(&e)),
                };
                (t, reading)
            })
            .collect();
        LoadSnapshot { at, threads }
    }

    /// The instant given to [`LoadSnapshot::take`].
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The load between `prev` and this snapshot, for this snapshot's
    /// threads (a thread only in `prev` is not reported). Fails only if this
    /// snapshot is not later than `prev`.
    pub fn since(&self, prev: &LoadSnapshot) -> Result<PeriodLoad, ThreadLoadError> {
        let period = self
            .at
            .checked_duration_since(prev.at)
            .filter(|p| !p.is_zero())
            .ok_or(ThreadLoadError::NotLater)?;
        let before: HashMap<TaskId, Schedstat> = prev
            .threads
            .iter()
            .filter_map(|(t, r)| match r {
                Reading::Counters(s) => Some((t.task, *s)),
                _ => None,
            })
            .collect();
        let mut load = PeriodLoad {
            period,
            threads: Vec::with_capacity(self.threads.len()),
            vcpu: GroupTotal::default(),
            nq: GroupTotal::default(),
            be: GroupTotal::default(),
        };
        for (thread, reading) in &self.threads {
            let outcome = match reading {
                Reading::Gone => ThreadPeriod::Gone,
                Reading::Failed(reason) => ThreadPeriod::Unreadable {
                    reason: reason.clone(),
                },
                Reading::Counters(now) => match before.get(&thread.task) {
                    Some(then) if now.run_ns >= then.run_ns && now.wait_ns >= then.wait_ns => {
                        ThreadPeriod::Measured(ThreadLoad {
                            util: (now.run_ns - then.run_ns) as f64 / period.as_nanos() as f64,
                            run_delay: Duration::from_nanos(now.wait_ns - then.wait_ns),
                            timeslices: now.timeslices.saturating_sub(then.timeslices),
                        })
                    }
                    _ => ThreadPeriod::New,
                },
            };
            if let ThreadPeriod::Measured(t) = &outcome {
                let total = match thread.group {
                    ThreadGroup::Vcpu => &mut load.vcpu,
                    ThreadGroup::Nq => &mut load.nq,
                    ThreadGroup::Be => &mut load.be,
                };
                total.util += t.util;
                total.run_delay += t.run_delay;
                total.measured += 1;
            }
            load.threads.push(ThreadReport {
                thread: *thread,
                period: outcome,
            });
        }
        Ok(load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cputime::current_tid;
    use crate::test_dir::TestDir;

    fn thread(group: ThreadGroup, pid: u32, tid: u32) -> GroupThread {
        GroupThread {
            group,
            task: TaskId { pid, tid, start: 0 },
        }
    }

    fn stat(t: &TestDir, pid: u32, tid: u32, run_ns: u64, wait_ns: u64, slices: u64) {
        t.write(
            &format!("{pid}/task/{tid}/schedstat"),
            &format!("{run_ns} {wait_ns} {slices}\n"),
        );
    }

    #[test]
    fn parses_schedstat() {
        assert_eq!(
            Schedstat::parse("123 45 6\n"),
            Some(Schedstat {
                run_ns: 123,
                wait_ns: 45,
                timeslices: 6
            })
        );
        assert_eq!(Schedstat::parse("123 45"), None);
        assert_eq!(Schedstat::parse("123 -4 5"), None);
        assert_eq!(Schedstat::parse(""), None);
    }

    #[test]
    fn per_thread_and_per_group_load_from_a_fake_proc() {
        let t = TestDir::new("proc");
        let threads = [
            thread(ThreadGroup::Vcpu, 100, 101),
            thread(ThreadGroup::Vcpu, 100, 102),
            thread(ThreadGroup::Nq, 7, 8),
            thread(ThreadGroup::Be, 200, 201),
        ];
        stat(&t, 100, 101, 1_000_000_000, 0, 10);
        stat(&t, 100, 102, 2_000_000_000, 500, 20);
        stat(&t, 7, 8, 0, 0, 0);
        // 201 is not there yet.
        let t0 = Instant::now();
        let prev = LoadSnapshot::take(&t.0, &threads, t0);

        // 100 ms later: 101 ran 50 ms and waited 10 ms, 102 ran the whole
        // period, 8 ran 20 ms; 201 appeared.
        stat(&t, 100, 101, 1_050_000_000, 10_000_000, 15);
        stat(&t, 100, 102, 2_100_000_000, 500, 21);
        stat(&t, 7, 8, 20_000_000, 3_000_000, 40);
        stat(&t, 200, 201, 5, 5, 5);
        let now = LoadSnapshot::take(&t.0, &threads, t0 + Duration::from_millis(100));
        let load = now.since(&prev).unwrap();

        assert_eq!(load.period, Duration::from_millis(100));
        assert_eq!(
            load.threads[0].period,
            ThreadPeriod::Measured(ThreadLoad {
                util: 0.5,
                run_delay: Duration::from_millis(10),
                timeslices: 5
            })
        );
        assert_eq!(load.threads[3].period, ThreadPeriod::New);
        assert_eq!(load.vcpu.measured, 2);
        assert!((load.vcpu.util - 1.5).abs() < 1e-9);
        assert_eq!(load.vcpu.run_delay, Duration::from_millis(10));
        assert!((load.nq.util - 0.2).abs() < 1e-9);
        assert_eq!(
            load.group(ThreadGroup::Nq).run_delay,
            Duration::from_millis(3)
        );
        assert_eq!(load.be, GroupTotal::default());
        let g = load.group_load();
        assert!((g.vcpu_util - 1.5).abs() < 1e-9 && (g.nq_util - 0.2).abs() < 1e-9);

        // The same instant twice, or the wrong way round: no period.
        assert!(matches!(now.since(&now), Err(ThreadLoadError::NotLater)));
        assert!(matches!(prev.since(&now), Err(ThreadLoadError::NotLater)));
    }

    #[test]
    fn gone_reused_and_broken_threads_do_not_spoil_the_period() {
        let t = TestDir::new("proc");
        let threads = [
            thread(ThreadGroup::Vcpu, 100, 101),
            thread(ThreadGroup::Vcpu, 100, 102),
            thread(ThreadGroup::Nq, 7, 8),
            thread(ThreadGroup::Nq, 7, 9),
            thread(ThreadGroup::Nq, 7, 10),
        ];
        for tid in [101, 102] {
            stat(&t, 100, tid, 1_000_000, 0, 1);
        }
        for tid in [8, 9, 10] {
            stat(&t, 7, tid, 1_000_000, 0, 1);
        }
        let t0 = Instant::now();
        let prev = LoadSnapshot::take(&t.0, &threads, t0);

        // 101 exits; 102's tid is reused (counters restart); 8 runs on;
        // 9's file turns to garbage; 10's task directory stays but its
        // schedstat vanishes (a kernel without schedstat).
        std::fs::remove_dir_all(t.0.join("100/task/101")).unwrap();
        stat(&t, 100, 102, 10, 0, 1);
        stat(&t, 7, 8, 11_000_000, 0, 2);
        t.write("7/task/9/schedstat", "garbage");
        std::fs::remove_file(t.0.join("7/task/10/schedstat")).unwrap();
        let load = LoadSnapshot::take(&t.0, &threads, t0 + Duration::from_millis(100))
            .since(&prev)
            .unwrap();

        let outcomes: Vec<&ThreadPeriod> = load.threads.iter().map(|r| &r.period).collect();
        assert_eq!(outcomes[0], &ThreadPeriod::Gone);
        assert_eq!(outcomes[1], &ThreadPeriod::New);
        assert!(matches!(outcomes[2], ThreadPeriod::Measured(l) if (l.util - 0.1).abs() < 1e-9));
        assert!(
            matches!(outcomes[3], ThreadPeriod::Unreadable { reason } if reason.contains("garbage")),
            "{outcomes:?}"
        );
        assert!(
            matches!(outcomes[4], ThreadPeriod::Unreadable { reason } if reason.contains("does not exist")),
            "{outcomes:?}"
        );
        assert_eq!(load.gone().map(|g| g.task.tid).collect::<Vec<_>>(), [101]);
        assert_eq!(load.vcpu.measured, 0);
        assert_eq!(load.nq.measured, 1);
        assert!((load.nq.util - 0.1).abs() < 1e-9);
    }

    #[test]
    fn measures_a_real_thread_and_sees_it_go() {
        let proc_root = Path::new("/proc");
        let pid = std::process::id();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (spun_tx, spun_rx) = std::sync::mpsc::channel();
        let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(current_tid()).unwrap();
            go_rx.recv().unwrap();
            // Run until the kernel has charged this thread some CPU time.
            let me = TaskId {
                pid: std::process::id(),
                tid: current_tid(),
                start: 0,
            };
            let start = read_schedstat(Path::new("/proc"), me).unwrap().unwrap();
            while read_schedstat(Path::new("/proc"), me)
                .unwrap()
                .unwrap()
                .run_ns
                == start.run_ns
            {
                std::hint::spin_loop();
            }
            spun_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
        });
        let tid = tid_rx.recv().unwrap();
        let threads = [thread(ThreadGroup::Nq, pid, tid)];
        let prev = LoadSnapshot::take(proc_root, &threads, Instant::now());
        go_tx.send(()).unwrap();
        spun_rx.recv().unwrap();
        let load = LoadSnapshot::take(proc_root, &threads, Instant::now())
            .since(&prev)
            .unwrap();
        match load.threads[0].period {
            ThreadPeriod::Measured(l) => assert!(l.util > 0.0, "{l:?}"),
            ref other => panic!("{other:?}"),
        }
        assert!(load.nq.util > 0.0);

        exit_tx.send(()).unwrap();
        worker.join().unwrap();
        // The kernel releases the task shortly after the join returns.
        let task = TaskId { pid, tid, start: 0 };
        let start = Instant::now();
        while read_schedstat(proc_root, task).unwrap().is_some() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "tid {tid} never went"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let load = LoadSnapshot::take(proc_root, &threads, Instant::now())
            .since(&prev)
            .unwrap();
        assert_eq!(load.threads[0].period, ThreadPeriod::Gone);
    }
}
