//! I/O on a frontend's kick and call eventfds that never blocks and never
//! spins, whatever the frontend does to them.
//!
//! The frontend hands us these descriptors and keeps its own copies: it can
//! clear `O_NONBLOCK` again (the flag lives on the open file it shares with
//! us), drive a call eventfd's counter to its maximum so that a write would
//! block, or send something that is not an eventfd at all (a pipe whose
//! other end it closes is readable forever: a worker woken by it would spin).
//! So: only eventfds are taken ([`is_eventfd`]), and every read and write
//! first asks `poll` with a zero timeout whether it can proceed, then
//! treats `EAGAIN` as "a notification is pending".

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;

/// True if `f` is an eventfd (its `/proc/self/fdinfo` entry has an
/// `eventfd-count` line).
pub fn is_eventfd(f: &File) -> bool {
    std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd()))
        .is_ok_and(|info| info.lines().any(|l| l.starts_with("eventfd-count:")))
}

/// What `poll` says of `f` right now (`events` asked).
fn ready(f: &File, events: libc::c_short) -> io::Result<libc::c_short> {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd on our stack; timeout 0 never blocks.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r >= 0 {
            return Ok(p.revents);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads and resets an eventfd's counter without blocking: how many times
/// it was signalled since the last read, 0 if not at all. An error means
/// the descriptor is unusable (hung up, or not an eventfd after all): the
/// port should be reset.
pub fn drain(f: &File) -> io::Result<u64> {
    let rev = ready(f, libc::POLLIN)?;
    if rev & (libc::POLLERR | libc::POLLNVAL) != 0 {
        return Err(io::Error::other("descriptor error"));
    }
    if rev & libc::POLLIN == 0 {
        if rev & libc::POLLHUP != 0 {
            return Err(io::Error::other("hung up"));
        }
        return Ok(0);
    }
    let mut buf = [0u8; 8];
    match (&*f).read(&mut buf) {
        Ok(8) => Ok(u64::from_ne_bytes(buf)),
        Ok(0) => Err(io::Error::other("end of file")),
        Ok(n) => Err(io::Error::other(format!("short read of {n} bytes"))),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// What [`signal`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signalled {
    /// The counter was incremented.
    Sent,
    /// The counter is full: the other side has a notification pending.
    Pending,
}

/// Adds 1 to an eventfd's counter without blocking.
pub fn signal(f: &File) -> io::Result<Signalled> {
    let rev = ready(f, libc::POLLOUT)?;
    if rev & (libc::POLLERR | libc::POLLNVAL) != 0 {
        return Err(io::Error::other("descriptor error"));
    }
    if rev & libc::POLLOUT == 0 {
        return Ok(Signalled::Pending);
    }
    match (&*f).write(&1u64.to_ne_bytes()) {
        Ok(8) => Ok(Signalled::Sent),
        Ok(n) => Err(io::Error::other(format!("short write of {n} bytes"))),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Signalled::Pending),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A *blocking* eventfd (as a frontend that cleared O_NONBLOCK leaves it).
    fn blocking_eventfd() -> File {
        // SAFETY: eventfd with plain flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        unsafe { File::from_raw_fd(fd) }
    }

    #[test]
    fn reads_never_block_and_count_signals() {
        let f = blocking_eventfd();
        assert_eq!(
            drain(&f).unwrap(),
            0,
            "an empty blocking eventfd must not block"
        );
        assert_eq!(signal(&f).unwrap(), Signalled::Sent);
        assert_eq!(signal(&f).unwrap(), Signalled::Sent);
        assert_eq!(drain(&f).unwrap(), 2);
        assert_eq!(drain(&f).unwrap(), 0);
        assert!(is_eventfd(&f));
    }

    #[test]
    fn a_full_counter_is_a_pending_call_not_a_blocked_worker() {
        let f = blocking_eventfd();
        // The largest value an eventfd holds: any further write would block.
        (&f).write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        assert_eq!(signal(&f).unwrap(), Signalled::Pending);
    }

    #[test]
    fn pipes_are_not_eventfds_and_a_closed_pipe_is_an_error() {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors nothing else owns.
        let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        assert!(!is_eventfd(&r));
        drop(w);
        assert!(drain(&r).is_err(), "end of file must not read as no kicks");
    }
}
