//! How a VM port reaches its frontend: on a socket vadapt listens on, or on
//! a socket the frontend listens on.
//!
//! Both ways let vadapt be restarted (upgraded) while its VMs keep running,
//! as OVS-DPDK allows with `dpdkvhostuser` and `dpdkvhostuserclient` ports:
//!
//! * [`SocketMode::Server`](crate::config::SocketMode::Server) (the default): vadapt creates the socket, QEMU
//!   connects to it. Started with `-chardev socket,path=..,reconnect=1`,
//!   QEMU connects again a second after vadapt went away; without
//!   `reconnect` the VM loses its network until it is restarted.
//! * [`SocketMode::Client`](crate::config::SocketMode::Client): QEMU creates the socket
//!   (`-chardev socket,path=..,server=on,wait=off`), vadapt connects to it
//!   and, whenever the connection ends or cannot be made, connects again with
//!   a backoff from [`MIN_BACKOFF`] doubling to [`MAX_BACKOFF`]. A restarted
//!   vadapt reconnects at once, without waiting for QEMU's timer.
//!
//! A frontend that accepts the connection and then closes it at once does
//! not make vadapt spin: the backoff only starts over after a connection
//! that lasted [`STABLE_CONNECTION`].

use crate::socket_file::{self, connect_nonblocking, Access, OwnedSocket, SocketFileError};
use std::io::ErrorKind;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vadapt_qemu::peer_text::PeerText;

/// First wait before connecting again to a frontend's socket.
pub const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// Longest wait between two connection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A connection that lasted this long starts the backoff over.
pub const STABLE_CONNECTION: Duration = Duration::from_secs(1);
/// How often a wait checks the daemon's stop flag.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// Errors creating a port's socket.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The socket could not be bound at its path (refused, in use, ...).
    #[error(transparent)]
    Socket(#[from] SocketFileError),
    /// `--socket-group` names no group.
    #[error("unknown group `{0}` for --socket-group")]
    UnknownGroup(String),
}

/// Bind `path` with mode 0600, or 0660 owned by `group`, as
/// [`socket_file::bind`] says (nothing there but a stale socket, or
/// refused); a missing folder is created as [`crate::socket_dir::ensure`]
/// says (0750, owned by `group`). The socket comes back with its
/// [`OwnedSocket`], through which alone it is removed.
pub fn listen(
    path: &Path,
    group: Option<&str>,
) -> Result<(UnixListener, OwnedSocket), ListenError> {
    // Resolve the group before anything is created, so an unknown group
    // leaves nothing on disk.
    let gid = match group {
        Some(g) => Some(group_id(g).ok_or_else(|| ListenError::UnknownGroup(g.to_string()))?),
        None => None,
    };
    let mode = if gid.is_some() { 0o660 } else { 0o600 };
    Ok(socket_file::bind(path, Access { mode, gid })?)
}

fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then(|| f.nth(1)?.parse().ok())?
    })
}

/// Where a port's frontend connections come from.
#[derive(Debug)]
pub enum FrontendSocket {
    /// Accept on our socket ([`listen`]).
    Listen(UnixListener),
    /// Connect to the frontend's socket.
    Connect(Connector),
}

impl FrontendSocket {
    /// The next frontend connection, in blocking mode; `None` once `stop` is set.
    pub fn next(&mut self, port: &str, stop: &AtomicBool) -> Option<UnixStream> {
        loop {
            let stream = match self {
                FrontendSocket::Listen(l) => accept(l, port, stop)?,
                FrontendSocket::Connect(c) => c.connect(port, stop)?,
            };
            match stream.set_nonblocking(false) {
                Ok(()) => return Some(stream),
                Err(e) => {
                    tracing::warn!(port, error = %e, "cannot use the frontend's connection");
                    self.ended(Duration::ZERO);
                }
            }
        }
    }

    /// The connection [`FrontendSocket::next`] returned has ended after `lasted`.
    pub fn ended(&mut self, lasted: Duration) {
        if let FrontendSocket::Connect(c) = self {
            c.ended(lasted);
        }
    }
}

fn accept(l: &UnixListener, port: &str, stop: &AtomicBool) -> Option<UnixStream> {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => return Some(s),
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(STOP_CHECK),
            Err(e) => {
                tracing::warn!(port, error = %e, "accept failed");
                std::thread::sleep(4 * STOP_CHECK);
            }
        }
    }
    None
}

/// Connects to a frontend's socket, with backoff between attempts.
#[derive(Debug)]
pub struct Connector {
    path: PathBuf,
    delay: Duration,
    /// The error of the last failed attempt, logged once per kind of error.
    failing: Option<ErrorKind>,
}

impl Connector {
    /// A connector to `path`; nothing is attempted yet.
    pub fn new(path: PathBuf) -> Self {
        Connector {
            path,
            delay: Duration::ZERO,
            failing: None,
        }
    }

    /// The wait before the next attempt.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    fn connect(&mut self, port: &str, stop: &AtomicBool) -> Option<UnixStream> {
        loop {
            if !sleep_unless_stopped(self.delay, stop) {
                return None;
            }
            match connect_nonblocking(&self.path) {
                Ok(s) => {
                    if self.failing.take().is_some() {
                        tracing::info!(port, socket = %PeerText::from_path(&self.path), "frontend's socket reachable again");
                    }
                    return Some(s);
                }
                Err(e) => {
                    if self.failing != Some(e.kind()) {
                        tracing::warn!(port, socket = %PeerText::from_path(&self.path), error = %e,
                            "cannot connect to the frontend's socket; retrying with backoff (at most every {} ms)",
                            MAX_BACKOFF.as_millis());
                        self.failing = Some(e.kind());
                    }
                    self.back_off();
                }
            }
        }
    }

    fn back_off(&mut self) {
        self.delay = (self.delay * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
    }

    fn ended(&mut self, lasted: Duration) {
        if lasted >= STABLE_CONNECTION {
            self.delay = Duration::ZERO;
        } else {
            self.back_off();
        }
    }
}

/// Sleep `d` in steps that check `stop`; false if `stop` was set.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let mut left = d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        if left.is_zero() {
            return true;
        }
        let step = left.min(STOP_CHECK);
        std::thread::sleep(step);
        left -= step;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_restarts_after_a_stable_connection() {
        let mut c = Connector::new("/nonexistent".into());
        assert_eq!(c.delay(), Duration::ZERO, "the first attempt is immediate");
        let mut seen = vec![];
        for _ in 0..10 {
            c.back_off();
            seen.push(c.delay().as_millis());
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        c.ended(Duration::from_millis(10));
        assert_eq!(c.delay(), MAX_BACKOFF, "a short connection does not reset");
        c.ended(STABLE_CONNECTION);
        assert_eq!(c.delay(), Duration::ZERO);
    }

    #[test]
    fn connecting_waits_for_the_socket_and_stops_on_request() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("fe.sock");
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut c = FrontendSocket::Connect(Connector::new(path.clone()));
                c.next("p", &stop)
            });
            std::thread::sleep(Duration::from_millis(100));
            let l = UnixListener::bind(&path).unwrap();
            let (_peer, _) = l.accept().unwrap();
            let got = h.join().unwrap().expect("connected once the socket exists");
            assert!(!is_nonblocking(&got), "handed over in blocking mode");
        });

        // A stop ends the wait for a socket that never appears.
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut c = FrontendSocket::Connect(Connector::new(t.path().join("never")));
                c.next("p", &stop)
            });
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
            assert!(h.join().unwrap().is_none());
        });
    }

    #[test]
    fn a_frontend_that_never_accepts_does_not_block_the_connector() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("fe.sock");
        // A listener that never accepts: its backlog fills up.
        let _l = UnixListener::bind(&path).unwrap();
        let mut held = vec![];
        let err = loop {
            match connect_nonblocking(&path) {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
            assert!(held.len() < 100_000, "backlog never filled");
        };
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    }

    fn is_nonblocking(s: &UnixStream) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: F_GETFL on a descriptor the stream owns.
        let fl = unsafe { libc::fcntl(s.as_raw_fd(), libc::F_GETFL) };
        fl & libc::O_NONBLOCK != 0
    }
}
