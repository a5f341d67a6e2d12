//! Who is at the other end of a unix socket: the pid the kernel recorded
//! when the connection was made (`SO_PEERCRED`), not what the peer says.

#![allow(unsafe_code)] // one getsockopt(SO_PEERCRED), explained below

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The pid of the process at the other end of `stream`, as the kernel
/// recorded it when the connection was made (`SO_PEERCRED`).
pub fn peer_pid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live unix socket owned by `stream`; `cred` is a
    // writable ucred and `len` its size, so the kernel writes at most that
    // many bytes into it.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(cred.pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::other("the peer's pid is unknown (another pid namespace?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_pid_is_the_kernels_word() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_pid(&a).unwrap(), std::process::id());
    }
}
