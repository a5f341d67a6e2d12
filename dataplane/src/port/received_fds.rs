//! Receiving bytes off a frontend's socket when vadapt keeps none of the
//! descriptors that ride on them: the serve loop's peek at the next
//! message's header (the kernel hands over duplicates even with
//! `MSG_PEEK`), and the requests vadapt reads itself (`SEND_RARP`,
//! `SET_LOG_FD`). Every descriptor received is closed here, whatever the
//! message's length, so none can leak.

use std::os::fd::RawFd;

/// Room for the kernel's limit of descriptors on one message (SCM_MAX_FD).
const MAX_RECEIVED_FDS: usize = 253;

/// `recvmsg` into `buf` with `flags`; closes every descriptor that came
/// with the bytes. Returns the bytes received and the descriptors closed.
pub(super) fn recv_closing_fds(
    fd: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> std::io::Result<(usize, usize)> {
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; (MAX_RECEIVED_FDS * 4 + 64) / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; every pointer set below points
    // into buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes valid buffers owned by this frame and `buf`.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fds = 0;
    // SAFETY: the CMSG_* walk stays within the `msg_controllen` bytes the
    // kernel filled in; each SCM_RIGHTS payload is an array of descriptors
    // that are ours now, closed here.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<libc::c_int>();
                for i in 0..len / std::mem::size_of::<libc::c_int>() {
                    libc::close(p.add(i).read_unaligned());
                    fds += 1;
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, fds))
}
