//! Signals to `vadapt serve`. During start-up they are sent inside a
//! window the test hook `VADAPT_TEST_START_PAUSE_MS` holds open (start-up
//! pauses after each port; debug builds only): a SIGTERM while some
//! sockets exist and others do not ends in the orderly path (exit 0, every
//! socket removed), and a SIGHUP there is answered once start-up is done.
//! A SIGHUP whose reload is refused says so in the log. A stop that hangs
//! (the test hook `VADAPT_TEST_STOP_HANG_MS`) ends at the stop deadline with
//! exit status 1 and the sockets removed.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::tmpdir;

/// Ports, and start-up's pause after each.
const PORTS: usize = 6;
const PAUSE_MS: u64 = 400;

fn serve(dir: &Path) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vadapt"));
    c.args(["--log-level", "info", "serve", "--control"])
        .arg(dir.join("control.sock"));
    for i in 0..PORTS {
        c.arg("--vm").arg(format!(
            "name=vm{i},socket={}",
            dir.join(format!("vm{i}.sock")).display()
        ));
    }
    c.env("VADAPT_TEST_START_PAUSE_MS", PAUSE_MS.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Wait until `path` exists: here the point is the window itself (start-up
/// has made this port and pauses before the next), not readiness.
fn wait_for(path: &Path) {
    let since = Instant::now();
    while !path.exists() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until the daemon answers a control request (`stats`): it serves.
fn wait_until_serving(control: &Path) {
    use vadapt_dataplane::control::{request, Request};
    let since = Instant::now();
    while request(control, &Request::Stats).is_err() {
        assert!(since.elapsed() < Duration::from_secs(30), "never came up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
    s
}

#[test]
fn sigterm_during_start_up_undoes_it_and_exits_cleanly() {
    let dir = tmpdir("start-term");
    let mut child = serve(dir.path());
    // The second port exists, the others do not yet, nor the control socket.
    wait_for(&dir.path().join("vm1.sock"));
    assert!(!dir.path().join("control.sock").exists());
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    let log = stderr_of(&mut child);
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("stopped during start-up"), "{log}");
    assert_eq!(files(dir.path()), Vec::<String>::new(), "{log}");
}

#[test]
fn sighup_during_start_up_reloads_once_it_is_done() {
    let dir = tmpdir("start-hup");
    let mut child = serve(dir.path());
    wait_for(&dir.path().join("vm0.sock"));
    signal(&child, libc::SIGHUP);
    // Start-up goes on to the end: every port and the control socket.
    let control = dir.path().join("control.sock");
    wait_until_serving(&control);
    for i in 0..PORTS {
        assert!(dir.path().join(format!("vm{i}.sock")).exists(), "vm{i}");
    }
    // A SIGTERM sent at once still finds the reload answered first or the
    // stop orderly: either way the daemon exits 0 and leaves nothing.
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    let log = stderr_of(&mut child);
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("SIGHUP: reloading"), "{log}");
    assert_eq!(files(dir.path()), Vec::<String>::new(), "{log}");
}

#[test]
fn a_refused_sighup_reload_is_logged() {
    let dir = tmpdir("hup-refused");
    let file = dir.path().join("vadapt.toml");
    let control = dir.path().join("control.sock");
    std::fs::write(
        &file,
        format!(
            "control = \"{}\"\n[[vm]]\nname = \"vm0\"\nsocket = \"{}\"\n",
            control.display(),
            dir.path().join("vm0.sock").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["--log-level", "info", "serve", "--config"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_serving(&control);
    std::fs::write(&file, "policy = [\n").unwrap();
    signal(&child, libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(600));
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    let log = stderr_of(&mut child);
    assert!(status.success(), "{status}: {log}");
    let refused: Vec<_> = log
        .lines()
        .filter(|l| l.contains("reload refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    assert!(refused[0].contains("ERROR"), "{log}");
}

#[test]
fn a_stop_that_hangs_ends_at_the_deadline_with_the_sockets_removed() {
    let dir = tmpdir("stop-hang");
    let control = dir.path().join("control.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["--log-level", "info", "serve", "--control"])
        .arg(&control)
        .arg("--vm")
        .arg(format!(
            "name=vm0,socket={}",
            dir.path().join("vm0.sock").display()
        ))
        .env("VADAPT_TEST_STOP_HANG_MS", "60000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_serving(&control);
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    let log = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("shutdown did not finish within 1500 ms"),
        "{log}"
    );
    assert_eq!(files(dir.path()), Vec::<String>::new(), "{log}");
}
