//! `--cores-control PATH` (with `--mode rr`): every reporting period the guest sends the P95
//! of the round trips completed in that period to the daemon's control socket, as
//! `{"cmd":"cores-report","p95_us":N}` — the sample vSPACE's threshold explorer feeds on
//! (what `vadapt cores report` sends by hand).
//!
//! The line is written here with `serde_json` rather than through
//! `vadapt_dataplane::control::request`: the guest is a frontend that builds and runs without
//! the daemon's crate (and its async runtime), and the request is one line. The protocol is
//! the control socket's: one JSON request per connection, one JSON answer line
//! (`{"status":"ok"}` or `{"status":"error","error":...}`), then the daemon closes.
//!
//! * A period without a completed round trip sends nothing: there is no P95 to report, and
//!   a made-up value would mislead the explorer.
//! * P95 is rounded to the nearest microsecond, and is at least 1. (The histogram keeps 3
//!   significant digits and reports a bucket's upper end: a little above the sample.)
//! * Each exchange is bounded ([`report_timeout`]); a failure is never fatal. The first
//!   failure is logged at once, later ones at most every [`FailureLog::EVERY`] with a count,
//!   and a recovery once.
//! * Periods are kept on a fixed grid; a report that overran skips the ticks it missed rather
//!   than sending a burst.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::{CoresReportStats, LatencyHistogram};
use crate::period_latency::PeriodLatency;

/// Longest answer line read from the daemon, bytes.
const MAX_ANSWER: u64 = 64 * 1024;
/// Longest sleep of the reporter before it looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(20);

/// Why one report did not get through.
#[derive(Debug, thiserror::Error)]
pub enum CoresReportError {
    /// Nothing listens at the path (daemon not running, or another path).
    #[error("cannot connect to the daemon's control socket {path}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Sending the request or reading the answer failed or timed out.
    #[error("control socket I/O failed")]
    Io(#[from] io::Error),
    /// The daemon closed the connection without answering.
    #[error("the daemon closed the control connection without an answer")]
    NoAnswer,
    /// The answer was not the control socket's JSON.
    #[error("malformed answer from the daemon: {0}")]
    Malformed(String),
    /// The daemon refused the report (e.g. its core manager is not running).
    #[error("the daemon refused the report: {0}")]
    Refused(String),
}

/// How long one report may take: the period, at least 100 ms (a report later than that is
/// stale anyway).
pub fn report_timeout(period: Duration) -> Duration {
    period.max(Duration::from_millis(100))
}

/// Sends one `cores-report` to the control socket at `path` and checks the answer, every
/// step bounded by `timeout`.
pub fn send_cores_report(
    path: &Path,
    p95_us: u64,
    timeout: Duration,
) -> Result<(), CoresReportError> {
    let mut s = UnixStream::connect(path).map_err(|source| CoresReportError::Connect {
        path: path.to_path_buf(),
        source,
    })?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut line = serde_json::json!({"cmd": "cores-report", "p95_us": p95_us}).to_string();
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut answer = Vec::new();
    BufReader::new(s.take(MAX_ANSWER)).read_until(b'\n', &mut answer)?;
    if answer.is_empty() {
        return Err(CoresReportError::NoAnswer);
    }
    let malformed = || CoresReportError::Malformed(String::from_utf8_lossy(&answer).into());
    let v: serde_json::Value = serde_json::from_slice(&answer).map_err(|_| malformed())?;
    match v.get("status").and_then(|s| s.as_str()) {
        Some("ok") => Ok(()),
        Some("error") => Err(CoresReportError::Refused(
            v.get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("no reason given")
                .to_string(),
        )),
        _ => Err(malformed()),
    }
}

/// P95 of `h` in whole microseconds, rounded to the nearest, at least 1; `None` without a
/// sample.
pub fn p95_us(h: &LatencyHistogram) -> Option<u64> {
    h.quantile(0.95)
        .map(|ns| (ns.saturating_add(500) / 1000).max(1))
}

/// Rate-limits the log lines of failing reports: the first at once, then one every
/// [`FailureLog::EVERY`] with the count since, and one line when reports get through again.
#[derive(Debug, Default)]
pub struct FailureLog {
    failing: bool,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl FailureLog {
    /// Shortest interval between two failure lines.
    pub const EVERY: Duration = Duration::from_secs(10);

    /// A report failed at `now` with `error`: the line to log, if one is due.
    pub fn failure(&mut self, now: Instant, error: &str) -> Option<String> {
        self.failing = true;
        let due = self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= Self::EVERY);
        if !due {
            self.unlogged += 1;
            return None;
        }
        let line = match self.unlogged {
            0 => format!("P95 report to the daemon failed: {error}"),
            n => format!("P95 report to the daemon failed: {error} ({n} more failures since the last message)"),
        };
        self.last_logged = Some(now);
        self.unlogged = 0;
        Some(line)
    }

    /// A report got through: the line to log if reports were failing.
    pub fn success(&mut self) -> Option<String> {
        if !std::mem::take(&mut self.failing) {
            return None;
        }
        self.last_logged = None;
        self.unlogged = 0;
        Some("P95 reports to the daemon get through again".into())
    }
}

/// Reports every `period` until `stop`, from the round trips in `latency`, to `control`.
/// Runs on the calling thread; returns what it did.
pub fn run_reporter(
    control: &Path,
    period: Duration,
    latency: &PeriodLatency,
    stop: &Arc<AtomicBool>,
) -> CoresReportStats {
    let mut stats = CoresReportStats::default();
    let mut log = FailureLog::default();
    let mut hist = LatencyHistogram::new();
    let timeout = report_timeout(period);
    let period = period.max(Duration::from_millis(1));
    let mut next = Instant::now() + period;
    latency.take(&mut hist); // the period starts now
    loop {
        // Sleep to the tick in slices, so that the end of the run is noticed promptly.
        loop {
            if stop.load(Ordering::Relaxed) {
                return stats;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(STOP_CHECK));
        }
        latency.take(&mut hist);
        match p95_us(&hist) {
            None => stats.empty_periods += 1,
            Some(p95) => match send_cores_report(control, p95, timeout) {
                Ok(()) => {
                    stats.sent += 1;
                    if let Some(line) = log.success() {
                        tracing::info!("{line}");
                    }
                }
                Err(e) => {
                    stats.failed += 1;
                    let msg = vadapt_host::error_chain::error_chain(&e);
                    if let Some(line) = log.failure(Instant::now(), &msg) {
                        tracing::warn!("{line}");
                    }
                    stats.last_error = Some(msg);
                }
            },
        }
        next += period;
        let now = Instant::now();
        if next <= now {
            // Skip the ticks a slow report overran.
            let behind = (now - next).as_nanos() / period.as_nanos() + 1;
            next += period * u32::try_from(behind).unwrap_or(u32::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A fake daemon control socket: answers each connection with `answer` and hands the
    /// request lines it read to the test, after `connections` of them or 5 s.
    fn fake_daemon(
        path: &Path,
        answer: &'static str,
        connections: usize,
    ) -> std::thread::JoinHandle<Vec<serde_json::Value>> {
        let listener = UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let give_up = Instant::now() + Duration::from_secs(5);
            while got.len() < connections && Instant::now() < give_up {
                let Ok((s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                let mut line = String::new();
                BufReader::new(&s).read_line(&mut line).unwrap();
                got.push(serde_json::from_str(&line).unwrap());
                let _ = (&s).write_all(answer.as_bytes());
            }
            got
        })
    }

    #[test]
    fn one_report_is_the_control_sockets_json_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let daemon = fake_daemon(&path, "{\"status\":\"ok\"}\n", 2);
        send_cores_report(&path, 123, Duration::from_secs(2)).unwrap();
        send_cores_report(&path, 7, Duration::from_secs(2)).unwrap();
        let got = daemon.join().unwrap();
        assert_eq!(
            got,
            [
                serde_json::json!({"cmd": "cores-report", "p95_us": 123}),
                serde_json::json!({"cmd": "cores-report", "p95_us": 7}),
            ]
        );
    }

    #[test]
    fn refusals_silence_and_absence_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let daemon = fake_daemon(
            &path,
            "{\"status\":\"error\",\"error\":\"the core manager is not running\"}\n",
            1,
        );
        let e = send_cores_report(&path, 1, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(&e, CoresReportError::Refused(m) if m.contains("not running")));
        daemon.join().unwrap();

        let silent = dir.path().join("silent.sock");
        let listener = UnixListener::bind(&silent).unwrap();
        let holder = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let start = Instant::now();
        let e = send_cores_report(&silent, 1, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, CoresReportError::Io(_)), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(2));
        drop(holder.join());

        let garbage = dir.path().join("garbage.sock");
        let daemon = fake_daemon(&garbage, "hello\n", 1);
        let e = send_cores_report(&garbage, 1, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(e, CoresReportError::Malformed(_)), "{e:?}");
        daemon.join().unwrap();

        let e = send_cores_report(&dir.path().join("absent.sock"), 1, Duration::from_secs(1));
        assert!(matches!(e, Err(CoresReportError::Connect { .. })));
    }

    #[test]
    fn the_reporter_sends_each_periods_p95_and_skips_empty_periods() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let daemon = fake_daemon(&path, "{\"status\":\"ok\"}\n", 2);
        let latency = Arc::new(PeriodLatency::new(2));
        let stop = Arc::new(AtomicBool::new(false));
        let reporter = {
            let (path, latency, stop) = (path.clone(), Arc::clone(&latency), Arc::clone(&stop));
            std::thread::spawn(move || {
                run_reporter(&path, Duration::from_millis(200), &latency, &stop)
            })
        };
        // Samples in the middle of 200 ms periods, so that scheduling delays of up to
        // ~100 ms on a loaded machine do not move them into another period.
        // Period 1: 100 round trips of 1..=100 µs -> P95 95 µs.
        std::thread::sleep(Duration::from_millis(100));
        for i in 1..=100u64 {
            latency.record((i % 2) as u32, i * 1000);
        }
        // Period 2: 40 µs only. Period 3: nothing.
        std::thread::sleep(Duration::from_millis(200));
        latency.record(0, 40_000);
        std::thread::sleep(Duration::from_millis(400));
        stop.store(true, Ordering::Relaxed);
        let stats = reporter.join().unwrap();
        let got = daemon.join().unwrap();
        assert_eq!(got.len(), 2);
        let p95: Vec<u64> = got.iter().map(|v| v["p95_us"].as_u64().unwrap()).collect();
        assert_eq!(p95[0], 95, "{p95:?}");
        assert_eq!(p95[1], 40);
        assert_eq!(stats.sent, 2);
        assert_eq!(stats.failed, 0);
        assert!(stats.empty_periods >= 1, "{stats:?}");
    }

    #[test]
    fn a_missing_daemon_is_counted_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let latency = PeriodLatency::new(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(250));
            stop2.store(true, Ordering::Relaxed);
        });
        let feeder = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    latency.record(0, 10_000);
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            run_reporter(
                &dir.path().join("absent.sock"),
                Duration::from_millis(50),
                &latency,
                &stop,
            )
        });
        ender.join().unwrap();
        assert!(feeder.failed >= 2, "{feeder:?}");
        assert_eq!(feeder.sent, 0);
        assert!(feeder.last_error.unwrap().contains("absent.sock"));
    }

    #[test]
    fn failures_are_logged_once_then_rate_limited() {
        let mut log = FailureLog::default();
        let t0 = Instant::now();
        assert!(log.success().is_none(), "nothing to recover from");
        assert!(log.failure(t0, "boom").is_some());
        assert!(log.failure(t0 + Duration::from_secs(1), "boom").is_none());
        assert!(log.failure(t0 + Duration::from_secs(2), "boom").is_none());
        let line = log.failure(t0 + Duration::from_secs(11), "boom").unwrap();
        assert!(line.contains("2 more failures"), "{line}");
        assert!(log.success().is_some());
        assert!(log.success().is_none(), "recovery is said once");
        assert!(log.failure(t0 + Duration::from_secs(12), "again").is_some());
    }

    #[test]
    fn p95_is_in_whole_microseconds_at_least_one() {
        let mut h = LatencyHistogram::new();
        assert_eq!(p95_us(&h), None);
        h.record(300);
        assert_eq!(p95_us(&h), Some(1));
        h.reset();
        h.record(2_400);
        assert_eq!(p95_us(&h), Some(2));
        h.reset();
        h.record(40_000);
        assert_eq!(p95_us(&h), Some(40));
    }
}
