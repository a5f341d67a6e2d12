//! Child processes of a benchmark step.
//!
//! Every child runs in its own process group (so a terminal's Ctrl-C reaches
//! only `vadapt bench`, which then stops them in order), with
//! `PR_SET_PDEATHSIG` = SIGKILL (so even a `kill -9` of the bench leaves
//! nothing behind), and its stdout+stderr read line by line into memory and a
//! log file. Dropping a [`Child`] signals its whole group (SIGTERM, then
//! SIGKILL after a grace period) and reaps it: every exit path of a step —
//! `?` on an error, a panic unwinding, an interrupt — leaves no process.
//!
//! Waits are bounded and check the run's stop flag every few milliseconds, so
//! an interrupt ends a step within about [`POLL`].

use super::error::BenchError;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often waits look at the stop flag and at the child's state.
pub const POLL: Duration = Duration::from_millis(20);

/// How long a child gets to exit after SIGTERM before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

/// Process group ids of children not yet reaped (for tests and a last sweep).
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Process groups started by this process and not yet reaped.
pub fn live_groups() -> Vec<i32> {
    LIVE.lock()
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default()
}

/// Last-resort sweep: SIGKILL every group not yet reaped (a step that leaked
/// a [`Child`], e.g. with `mem::forget`); returns how many there were.
pub fn kill_leftovers() -> usize {
    let left = live_groups();
    for g in &left {
        // SAFETY: killpg(2) on a group this process created; no memory involved.
        unsafe {
            libc::killpg(*g, libc::SIGKILL);
        }
    }
    left.len()
}

/// Sleep `d`, returning early with [`BenchError::Interrupted`] when `stop` is set.
pub fn sleep(d: Duration, stop: &AtomicBool) -> Result<(), BenchError> {
    let end = Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(POLL));
    }
}

/// Wait until `path` exists (a socket a child creates), failing early when
/// `child` dies or `stop` is set.
pub fn wait_path(path: &Path, timeout: Duration, child: &mut Child) -> Result<(), BenchError> {
    let end = Instant::now() + timeout;
    while !path.exists() {
        child.check_alive()?;
        if Instant::now() > end {
            return Err(BenchError::Timeout {
                name: child.name.clone(),
                what: format!("creating {}", path.display()),
                secs: timeout.as_secs_f64(),
                tail: child.tail(30),
            });
        }
        sleep(POLL, &child.stop)?;
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Output {
    lines: Vec<String>,
    /// Readers still running (stdout, stderr).
    open: usize,
}

/// A running child process (see the module docs).
#[derive(Debug)]
pub struct Child {
    /// Short name for messages and the log file.
    pub name: String,
    /// The command line, for messages.
    pub argv: Vec<String>,
    proc: std::process::Child,
    stdin: Option<ChildStdin>,
    out: Arc<(Mutex<Output>, Condvar)>,
    readers: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    reaped: bool,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// Name (log file `<dir>/<name>.log`).
    pub name: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Give the child a stdin pipe (testpmd's interactive mode).
    pub stdin: bool,
    /// Where the log goes.
    pub log_dir: PathBuf,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

impl Spawn {
    /// `argv` named `name`, logging into `log_dir`, no stdin.
    pub fn new(name: &str, argv: Vec<String>, log_dir: &Path) -> Spawn {
        Spawn {
            name: name.to_string(),
            argv,
            stdin: false,
            log_dir: log_dir.to_path_buf(),
            env: Vec::new(),
        }
    }
}

impl Child {
    /// Start `s`. `stop` is the run's interrupt flag, checked by every wait.
    pub fn spawn(s: Spawn, stop: &Arc<AtomicBool>) -> Result<Child, BenchError> {
        let (prog, args) = s.argv.split_first().ok_or_else(|| BenchError::Spawn {
            what: s.name.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
        })?;
        let log_path = s.log_dir.join(format!("{}.log", s.name));
        let log = File::create(&log_path).map_err(BenchError::io(&log_path))?;
        let log = Arc::new(Mutex::new(log));
        if let Ok(mut l) = log.lock() {
            let _ = writeln!(l, "$ {}", s.argv.join(" "));
        }
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .stdin(if s.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in &s.env {
            cmd.env(k, v);
        }
        // SAFETY: the closure runs in the forked child before exec and only
        // calls prctl(2), which is async-signal-safe; it touches no memory
        // shared with the parent.
        unsafe {
            cmd.pre_exec(|| {
                // Die with the bench process even if it is SIGKILLed.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut proc = cmd.spawn().map_err(|source| BenchError::Spawn {
            what: format!("{} ({})", s.name, prog),
            source,
        })?;
        let pid = proc.id() as i32;
        if let Ok(mut live) = LIVE.lock() {
            live.insert(pid);
        }
        let out = Arc::new((
            Mutex::new(Output {
                lines: Vec::new(),
                open: 2,
            }),
            Condvar::new(),
        ));
        let mut readers = Vec::new();
        let streams: [Option<Box<dyn Read + Send>>; 2] = [
            proc.stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
            proc.stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        ];
        for stream in streams {
            let out = Arc::clone(&out);
            let log = Arc::clone(&log);
            let Some(stream) = stream else {
                if let Ok(mut o) = out.0.lock() {
                    o.open -= 1;
                }
                continue;
            };
            readers.push(std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match r.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = String::from_utf8_lossy(&buf)
                                .trim_end_matches(['\r', '\n'])
                                .to_string();
                            if let Ok(mut l) = log.lock() {
                                let _ = writeln!(l, "{line}");
                            }
                            if let Ok(mut o) = out.0.lock() {
                                o.lines.push(line);
                            }
                            out.1.notify_all();
                        }
                    }
                }
                if let Ok(mut o) = out.0.lock() {
                    o.open -= 1;
                }
                out.1.notify_all();
            }));
        }
        Ok(Child {
            name: s.name,
            argv: s.argv,
            stdin: proc.stdin.take(),
            proc,
            out,
            readers,
            stop: Arc::clone(stop),
            reaped: false,
        })
    }

    /// Process id (= process group id).
    pub fn pid(&self) -> i32 {
        self.proc.id() as i32
    }

    /// The stop flag this child's waits obey.
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.stop
    }

    /// Number of output lines so far: pass to [`Child::wait_line`] to skip older output.
    pub fn mark(&self) -> usize {
        self.out.0.lock().map(|o| o.lines.len()).unwrap_or(0)
    }

    /// Output lines from index `from`.
    pub fn lines_since(&self, from: usize) -> Vec<String> {
        self.out
            .0
            .lock()
            .map(|o| {
                o.lines
                    .get(from..)
                    .map(<[String]>::to_vec)
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// The last `n` output lines, for error messages.
    pub fn tail(&self, n: usize) -> String {
        let lines = self.lines_since(self.mark().saturating_sub(n));
        format!(
            "--- last {} lines of {} ---\n{}",
            lines.len(),
            self.name,
            lines.join("\n")
        )
    }

    /// Error unless the child still runs.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        match self.proc.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => {
                self.join_readers();
                Err(BenchError::ChildExited {
                    name: self.name.clone(),
                    status: st.to_string(),
                    tail: self.tail(30),
                })
            }
            Err(e) => Err(BenchError::Failed(format!(
                "cannot wait for {}: {e}",
                self.name
            ))),
        }
    }

    /// Wait for the first line at or after `since` for which `pred` holds;
    /// returns its index and text.
    pub fn wait_line(
        &mut self,
        what: &str,
        since: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<(usize, String), BenchError> {
        let end = Instant::now() + timeout;
        let mut i = since;
        loop {
            {
                let (lock, cv) = &*self.out;
                let o = lock
                    .lock()
                    .map_err(|_| BenchError::Failed("poisoned".into()))?;
                while i < o.lines.len() {
                    if pred(&o.lines[i]) {
                        return Ok((i, o.lines[i].clone()));
                    }
                    i += 1;
                }
                let closed = o.open == 0;
                drop(
                    cv.wait_timeout(o, POLL)
                        .map_err(|_| BenchError::Failed("poisoned".into()))?,
                );
                if closed {
                    // Output ended: one more scan happened above; the child is gone.
                    self.check_alive()?;
                }
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(BenchError::Interrupted);
            }
            if let Err(e) = self.check_alive() {
                // It may have printed the line just before exiting.
                let lines = self.lines_since(i);
                if let Some((k, l)) = lines.iter().enumerate().find(|(_, l)| pred(l)) {
                    return Ok((i + k, l.clone()));
                }
                return Err(e);
            }
            if Instant::now() > end {
                return Err(BenchError::Timeout {
                    name: self.name.clone(),
                    what: what.to_string(),
                    secs: timeout.as_secs_f64(),
                    tail: self.tail(30),
                });
            }
        }
    }

    /// Write one line to the child's stdin.
    pub fn send(&mut self, line: &str) -> Result<(), BenchError> {
        let name = self.name.clone();
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| BenchError::Failed(format!("{name} has no stdin pipe")))?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| {
                BenchError::Failed(format!("cannot write to {name}: {e}\n{}", self.tail(20)))
            })
    }

    /// Wait for the child to exit by itself within `timeout`; its exit code
    /// (`None` when killed by a signal). On timeout or interrupt the child is
    /// left to `Drop`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>, BenchError> {
        let end = Instant::now() + timeout;
        loop {
            match self.proc.try_wait() {
                Ok(Some(st)) => {
                    self.finish_reap();
                    return Ok(st.code());
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(BenchError::Failed(format!(
                        "cannot wait for {}: {e}",
                        self.name
                    )))
                }
            }
            if Instant::now() > end {
                return Err(BenchError::Timeout {
                    name: self.name.clone(),
                    what: "exit".into(),
                    secs: timeout.as_secs_f64(),
                    tail: self.tail(30),
                });
            }
            sleep(POLL, &self.stop)?;
        }
    }

    /// Signal the whole group with `sig`.
    pub fn signal(&self, sig: i32) {
        if !self.reaped {
            // SAFETY: killpg(2) with the group id of our own child; no memory involved.
            unsafe {
                libc::killpg(self.pid(), sig);
            }
        }
    }

    /// Stop the child and its group: `sig`, then SIGKILL after `grace`; reap it.
    pub fn terminate(&mut self, sig: i32, grace: Duration) {
        if self.reaped {
            return;
        }
        if matches!(self.proc.try_wait(), Ok(None)) {
            self.signal(sig);
            let end = Instant::now() + grace;
            while matches!(self.proc.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(POLL);
            }
        }
        // The leader may be gone while other members of its group linger.
        // SAFETY: as in `signal`.
        unsafe {
            libc::killpg(self.pid(), libc::SIGKILL);
        }
        let _ = self.proc.wait();
        self.finish_reap();
    }

    fn finish_reap(&mut self) {
        if self.reaped {
            return;
        }
        // Members of the group outlive a leader that exited by itself: end them.
        // SAFETY: as in `signal`; ESRCH when the group is already empty.
        unsafe {
            libc::killpg(self.pid(), libc::SIGKILL);
        }
        self.reaped = true;
        self.stdin = None;
        self.join_readers();
        if let Ok(mut live) = LIVE.lock() {
            live.remove(&self.pid());
        }
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.terminate(libc::SIGTERM, GRACE);
    }
}

/// Run a short command to completion within `timeout`; its output lines, or
/// an error with them when it fails.
pub fn run_once(
    s: Spawn,
    stop: &Arc<AtomicBool>,
    timeout: Duration,
) -> Result<Vec<String>, BenchError> {
    let mut c = Child::spawn(s, stop)?;
    match c.wait_exit(timeout)? {
        Some(0) => Ok(c.lines_since(0)),
        code => Err(BenchError::Failed(format!(
            "`{}` failed (exit {code:?})\n{}",
            c.argv.join(" "),
            c.tail(20)
        ))),
    }
}

/// Wait up to 5 s for [`pid_gone`]: SIGKILL is delivered asynchronously, so a
/// grandchild may still be running for a moment after its group was killed.
#[cfg(test)]
pub fn gone_soon(pid: i32) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while !pid_gone(pid) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[cfg(test)]
/// True when process `pid` is gone (or a zombie no one reaped yet: a dead
/// grandchild reparented to a PID 1 that does not reap).
pub fn pid_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// CPU time (user + system) of every thread of process `pid`, seconds, from
/// `/proc/<pid>/task/*/stat` (clock ticks).
pub fn process_cpu_seconds(pid: i32) -> Option<f64> {
    threads_cpu_seconds(pid, |_| true)
}

/// CPU time of the threads of `pid` whose name (`comm`) passes `pick`, seconds.
pub fn threads_cpu_seconds(pid: i32, pick: impl Fn(&str) -> bool) -> Option<f64> {
    // SAFETY: sysconf(3) has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(e) = e else { continue };
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = s.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        if !pick(comm) {
            continue;
        }
        // Fields after the comm: state is field 3, utime 14, stime 15 (1-based).
        let f: Vec<&str> = rest.split_whitespace().collect();
        let u: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        ticks += u + st;
    }
    Some(ticks as f64 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        // Removed when the test's thread ends.
        static DIR: tempfile::TempDir = tempfile::Builder::new()
            .prefix("vadapt-bench-child-")
            .tempdir()
            .unwrap();
    }

    fn dir() -> PathBuf {
        DIR.with(|d| d.path().to_owned())
    }

    fn sh(name: &str, script: &str, stop: &Arc<AtomicBool>) -> Child {
        let argv = vec!["sh".into(), "-c".into(), script.into()];
        Child::spawn(Spawn::new(name, argv, &dir()), stop).unwrap()
    }

    #[test]
    fn lines_are_captured_and_waited_for() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = sh("echo", "echo one; echo two >&2; echo three", &stop);
        let (i, l) = c
            .wait_line("three", 0, Duration::from_secs(10), |l| l == "three")
            .unwrap();
        assert_eq!(l, "three");
        assert!(i <= 2);
        assert_eq!(c.wait_exit(Duration::from_secs(10)).unwrap(), Some(0));
        let all = c.lines_since(0);
        assert!(all.contains(&"one".to_string()) && all.contains(&"two".to_string()));
    }

    #[test]
    fn a_line_that_never_comes_fails_with_the_tail() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = sh("quiet", "echo hello; exit 3", &stop);
        let e = c
            .wait_line("never", 0, Duration::from_secs(10), |l| l == "never")
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, BenchError::ChildExited { .. }), "{msg}");
        assert!(msg.contains("hello"), "{msg}");
    }

    #[test]
    fn drop_kills_the_whole_group_including_grandchildren() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = sh("tree", "sleep 60 & echo grandchild $!; sleep 60", &stop);
        let (_, l) = c
            .wait_line("pid", 0, Duration::from_secs(10), |l| {
                l.starts_with("grandchild")
            })
            .unwrap();
        let gc: i32 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
        let pid = c.pid();
        assert!(!pid_gone(pid) && !pid_gone(gc));
        assert!(live_groups().contains(&pid));
        drop(c);
        assert!(gone_soon(pid), "child {pid} survived");
        assert!(gone_soon(gc), "grandchild {gc} survived");
        assert!(!live_groups().contains(&pid));
    }

    #[test]
    fn stop_flag_interrupts_waits_and_sleeps() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = sh("sleeper", "sleep 60", &stop);
        let s2 = Arc::clone(&stop);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            s2.store(true, Ordering::Relaxed);
        });
        let e = c.wait_exit(Duration::from_secs(30)).unwrap_err();
        assert!(matches!(e, BenchError::Interrupted));
        assert!(matches!(
            sleep(Duration::from_secs(30), &stop),
            Err(BenchError::Interrupted)
        ));
        t.join().unwrap();
    }

    #[test]
    fn run_once_returns_output_or_the_failure() {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Spawn::new(
            "ok",
            vec!["sh".into(), "-c".into(), "echo hi".into()],
            &dir(),
        );
        assert_eq!(
            run_once(ok, &stop, Duration::from_secs(10)).unwrap(),
            ["hi"]
        );
        let bad = Spawn::new(
            "bad",
            vec!["sh".into(), "-c".into(), "echo oops; exit 4".into()],
            &dir(),
        );
        let e = run_once(bad, &stop, Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Some(4)") && e.contains("oops"), "{e}");
    }

    #[test]
    fn process_cpu_of_self_is_readable() {
        let s = process_cpu_seconds(std::process::id() as i32).unwrap();
        assert!(s >= 0.0);
        assert!(process_cpu_seconds(-5).is_none());
    }
}
