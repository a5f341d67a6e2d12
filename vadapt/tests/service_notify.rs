//! `vadapt serve` under systemd `Type=notify`, with a fake service manager:
//! a datagram socket named by `NOTIFY_SOCKET`, as systemd sets it. The
//! daemon must say `READY=1` only once its sockets listen, `RELOADING=1`
//! then `READY=1` around a SIGHUP reload, and `STOPPING=1` on SIGTERM; and
//! a `NOTIFY_SOCKET` nobody listens on must not stop it.
//! (No systemd runs as PID 1 on the development machines; the unit itself is
//! checked by `systemd-analyze verify` in scripts/test.sh.)

use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;
use common::tmpdir;

fn serve(dir: &Path, notify: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["serve", "--sink", "sink0", "--vm"])
        .arg(format!(
            "name=vm1,socket={}",
            dir.join("vm1.sock").display()
        ))
        .arg("--control")
        .arg(dir.join("control.sock"))
        .env("NOTIFY_SOCKET", notify)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A fake manager's socket (10 s read timeout) and a daemon asked for a
/// 200 ms watchdog, whose `WATCHDOG_PID` is `watchdog_pid` if given.
fn watched(dir: &Path, watchdog_pid: Option<&str>) -> (UnixDatagram, Child) {
    let notify = dir.join("notify.sock");
    let manager = UnixDatagram::bind(&notify).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vadapt"));
    cmd.args(["serve", "--sink", "sink0", "--control"])
        .arg(dir.join("control.sock"))
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "200000")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(pid) = watchdog_pid {
        cmd.env("WATCHDOG_PID", pid);
    }
    (manager, cmd.spawn().unwrap())
}

/// The next message, as text.
fn next(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification within 10 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

#[test]
fn ready_once_the_sockets_listen_reloading_and_stopping() {
    let dir = tmpdir("notify");
    let notify = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut child = serve(dir.path(), &notify);

    let ready = next(&manager);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(ready.contains("STATUS=serving"), "{ready:?}");
    // Ready means connectable, both the VM port and the control socket.
    UnixStream::connect(dir.path().join("vm1.sock")).expect("vm1.sock listens at READY=1");
    UnixStream::connect(dir.path().join("control.sock")).expect("control listens at READY=1");

    signal(&child, libc::SIGHUP);
    let reloading = next(&manager);
    assert!(
        reloading.lines().any(|l| l == "RELOADING=1")
            && reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC=")),
        "{reloading:?}"
    );
    let again = next(&manager);
    assert!(again.lines().any(|l| l == "READY=1"), "{again:?}");

    signal(&child, libc::SIGTERM);
    let stopping = next(&manager);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_notify_socket_nobody_listens_on_does_not_stop_the_daemon() {
    let dir = tmpdir("notify-none");
    let mut child = serve(dir.path(), &dir.path().join("nobody.sock"));
    let sock = dir.path().join("control.sock");
    let mut up = false;
    for _ in 0..200 {
        if UnixStream::connect(&sock).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(up, "the daemon did not come up");
    signal(&child, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
}

#[test]
fn watchdog_pings_at_half_the_interval_the_manager_asks_for() {
    let dir = tmpdir("notify-watchdog");
    let (manager, mut child) = watched(dir.path(), None);
    let ready = next(&manager);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    // Every 100 ms: five pings within a few seconds, each alone.
    for _ in 0..5 {
        let ping = next(&manager);
        assert_eq!(ping.trim_end(), "WATCHDOG=1", "{ping:?}");
    }
    signal(&child, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
}

#[test]
fn no_watchdog_pings_for_another_process() {
    let dir = tmpdir("notify-watchdog-pid");
    // WATCHDOG_PID names another process (pid 1): the watchdog is not ours.
    let (manager, mut child) = watched(dir.path(), Some("1"));
    let ready = next(&manager);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    manager
        .set_read_timeout(Some(Duration::from_millis(600)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let got = manager.recv(&mut buf).ok().map(|n| buf[..n].to_vec());
    assert!(
        got.is_none(),
        "{:?}",
        got.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
    signal(&child, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
}
