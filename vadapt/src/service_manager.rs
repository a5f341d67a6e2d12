//! Telling the service manager (systemd, `Type=notify`) how `vadapt serve`
//! stands: `READY=1` once every socket listens, `STOPPING=1` when a stop
//! begins, `RELOADING=1` then `READY=1` around a SIGHUP reload, each with a
//! `STATUS=` line for `systemctl status`, and `WATCHDOG=1` while the daemon
//! is whole (`crate::watchdog`).
//!
//! Written over the `sd-notify` crate (one small file over libc, no
//! libsystemd): the protocol is one datagram to `$NOTIFY_SOCKET`, and the
//! crate is that and no more. Without `$NOTIFY_SOCKET` (not started by
//! systemd) every call does nothing. A failure to notify never stops the
//! daemon: it is one WARN line, once. An abstract `@` socket, which only
//! some container managers use, is not supported by the crate and gets that
//! WARN line too.

use sd_notify::NotifyState;
use std::sync::atomic::{AtomicBool, Ordering};

/// The daemon's `sockets` listen (VM ports' and the control socket): `READY=1`.
pub fn ready(sockets: usize) {
    let status = format!("serving; {sockets} sockets listening");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// A SIGHUP reload begins: `RELOADING=1` with the monotonic time systemd
/// asks of it; [`reloaded`] follows.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// The reload is over, applied or not (the daemon logs which): `READY=1`.
pub fn reloaded() {
    send(&[NotifyState::Ready, NotifyState::Status("reloaded")]);
}

/// The daemon is alive and whole (`crate::watchdog`): `WATCHDOG=1`.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// A stop begins: `STOPPING=1`.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

fn send(states: &[NotifyState<'_>]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = sd_notify::notify(states) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cannot notify the service manager through NOTIFY_SOCKET \
                 (systemd Type=notify will time out): {e}"
            );
        }
    }
}
