//! A frontend's guest memory can never SIGBUS the daemon: a region larger
//! than its file and, by default, a file that could shrink are refused with
//! an error and a closed connection, while another port keeps working.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{parse_vm_spec, DaemonConfig};
use vadapt_dataplane::Daemon;
use vhost::vhost_user::Frontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};

fn memfd(size: u64, seal: bool) -> File {
    let flags = libc::MFD_CLOEXEC | if seal { libc::MFD_ALLOW_SEALING } else { 0 };
    // SAFETY: NUL-terminated literal name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"hostile".as_ptr(), flags) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(size).unwrap();
    if seal {
        // SAFETY: F_ADD_SEALS with an integer argument on our own memfd.
        let r = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(r, 0);
    }
    f
}

/// Offer one region of `region` bytes backed by `file`; true if the daemon
/// accepted it (and kept the connection).
fn offer(sock: &std::path::Path, file: &File, region: u64) -> bool {
    let stream = UnixStream::connect(sock).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let fe = Frontend::from_stream(stream, 2);
    fe.set_owner().unwrap();
    let features = fe.get_features().unwrap();
    fe.set_features(features & !(1 << 30)).unwrap();
    let r = VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: region,
        userspace_addr: 0x7f00_0000_0000,
        mmap_offset: 0,
        mmap_handle: file.as_raw_fd(),
    };
    // Without REPLY_ACK negotiated, a refusal shows as the closed
    // connection: the next request that expects a reply fails.
    fe.set_mem_table(&[r]).is_ok() && fe.get_features().is_ok()
}

fn wait_disconnected(d: &Daemon, port: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let s = d.registry().snapshot();
        if s.ports.iter().any(|p| p.name == port && !p.connected) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn memory_that_could_sigbus_is_refused_and_the_daemon_lives() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = DaemonConfig::default();
    for spec in [
        format!(
            "name=strict,socket={}",
            dir.path().join("strict.sock").display()
        ),
        format!(
            "name=lenient,socket={},unsealed_memory=accept",
            dir.path().join("lenient.sock").display()
        ),
    ] {
        cfg.vm.push(parse_vm_spec(&spec).unwrap());
    }
    cfg.control = dir.path().join("control.sock");
    let d = Daemon::start(cfg).unwrap();
    let strict = dir.path().join("strict.sock");
    let lenient = dir.path().join("lenient.sock");

    // 8 MiB announced over a 4 MiB file: refused on both ports.
    assert!(!offer(&strict, &memfd(4 << 20, true), 8 << 20));
    assert!(wait_disconnected(&d, "strict"));
    assert!(!offer(&lenient, &memfd(4 << 20, false), 8 << 20));
    // An unsealed file: refused where the port refuses it, taken where not.
    assert!(!offer(&strict, &memfd(4 << 20, false), 4 << 20));
    assert!(offer(&lenient, &memfd(4 << 20, false), 4 << 20));
    // A sealed file of the right size: taken.
    assert!(offer(&strict, &memfd(4 << 20, true), 4 << 20));
    // Still serving.
    assert!(vadapt_dataplane::control::request(
        &dir.path().join("control.sock"),
        &vadapt_dataplane::control::Request::Stats
    )
    .is_ok());
    d.shutdown();
}
