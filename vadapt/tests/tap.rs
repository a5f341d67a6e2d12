//! The TAP port: a frame the host sends on the TAP interface crosses the
//! switch to an echo port and comes back to the host, MACs swapped.
//!
//! Needs root and `/dev/net/tun` (both present on the CI machines); where
//! either is missing the test says so and passes without checking anything.

use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, TapPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_wire::ethernet::ETHERTYPE_EXPERIMENTAL;
use vadapt_wire::test_frames::ethernet_frame;
use vadapt_wire::Mac;

const ECHO: Mac = Mac([0x02, 0, 0, 0, 0xec, 0x07]);
const HOST: Mac = Mac([0x02, 0, 0, 0, 0x0a, 0x07]);

/// An AF_PACKET socket bound to one interface.
struct RawSocket(i32);

impl RawSocket {
    fn bind(ifname: &str) -> std::io::Result<RawSocket> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2); the fd is owned by the returned value.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = RawSocket(fd);
        let name = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: `name` is a valid C string for the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: zeroed sockaddr_ll is valid plain data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex as i32;
        // SAFETY: `sa` is a valid sockaddr_ll of the given length.
        let r = unsafe {
            libc::bind(
                s.0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: SO_RCVTIMEO takes a timeval that outlives the call.
        unsafe {
            libc::setsockopt(
                s.0,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        Ok(s)
    }

    fn send(&self, frame: &[u8]) -> isize {
        // SAFETY: `frame` is valid for reads of its length.
        unsafe { libc::send(self.0, frame.as_ptr().cast(), frame.len(), 0) }
    }

    fn recv(&self, buf: &mut [u8]) -> isize {
        // SAFETY: `buf` is valid for writes of its length.
        unsafe { libc::recv(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) }
    }
}

impl Drop for RawSocket {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

#[test]
fn host_frame_crosses_tap_to_echo_and_back() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("vadapt-tap-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let ifname = format!("vadt{}", std::process::id() % 100_000);
    let cfg = DaemonConfig {
        tap: vec![TapPortConfig::new(ifname.clone())],
        echo: vec![LocalPortConfig::new("echo0", Some(ECHO))],
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    let d = Daemon::start(cfg).expect("daemon with a TAP port starts");
    let sock = RawSocket::bind(&ifname).expect("raw socket on the TAP interface");
    let frame = ethernet_frame(
        ECHO,
        HOST,
        ETHERTYPE_EXPERIMENTAL,
        b"vadapt tap test payload.......................",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 2048];
    let mut back = None;
    'outer: while Instant::now() < deadline {
        assert_eq!(sock.send(&frame), frame.len() as isize);
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            let n = sock.recv(&mut buf);
            // Our own transmission is seen too (outgoing); the echo has its
            // MACs swapped.
            if n >= 14 && buf[0..6] == HOST.0 && buf[6..12] == ECHO.0 {
                back = Some(buf[..n as usize].to_vec());
                break 'outer;
            }
        }
    }
    let back = back.expect("the echo came back through the TAP port");
    assert_eq!(&back[12..frame.len()], &frame[12..]);
    // The TAP port counts a frame after writing it, so the raw socket can
    // see the echo before the counter moves: wait for the counters (bounded).
    let counted = |s: &vadapt_dataplane::metrics::StatsSnapshot| {
        s.port_total(&ifname, |q| q.tx_packets).unwrap() >= 1
            && s.port_total(&ifname, |q| q.rx_packets).unwrap() >= 1
            && s.port_total("echo0", |q| q.rx_packets).unwrap() >= 1
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = d.registry().snapshot();
    while !counted(&s) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        s = d.registry().snapshot();
    }
    assert!(s.port_total(&ifname, |q| q.tx_packets).unwrap() >= 1);
    assert!(s.port_total(&ifname, |q| q.rx_packets).unwrap() >= 1);
    assert!(s.port_total("echo0", |q| q.rx_packets).unwrap() >= 1);
    d.shutdown();
}

/// A TAP port with `mtu = 9000`: the interface gets the MTU, and a
/// 9014-byte frame the host sends crosses the switch to the echo port and
/// comes back whole (the kernel's AF_PACKET would refuse to send it on a
/// 1500-byte interface).
#[test]
fn jumbo_host_frame_crosses_a_9000_byte_tap_to_echo_and_back() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("vadapt-tap-mtu-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let ifname = format!("vadj{}", std::process::id() % 100_000);
    let cfg = DaemonConfig {
        tap: vec![TapPortConfig {
            mtu: Some(9000),
            ..TapPortConfig::new(ifname.clone())
        }],
        echo: vec![LocalPortConfig::new("echo0", Some(ECHO))],
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    let d = Daemon::start(cfg).expect("daemon with a TAP port starts");
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu")).unwrap();
    assert_eq!(mtu.trim(), "9000");
    let sock = RawSocket::bind(&ifname).expect("raw socket on the TAP interface");
    let payload: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
    let frame = ethernet_frame(ECHO, HOST, ETHERTYPE_EXPERIMENTAL, &payload);
    assert_eq!(frame.len(), 9014);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 16384];
    let mut back = None;
    'outer: while Instant::now() < deadline {
        assert_eq!(sock.send(&frame), frame.len() as isize, "sent whole");
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            let n = sock.recv(&mut buf);
            if n >= 14 && buf[0..6] == HOST.0 && buf[6..12] == ECHO.0 {
                back = Some(buf[..n as usize].to_vec());
                break 'outer;
            }
        }
    }
    let back = back.expect("the jumbo echo came back through the TAP port");
    assert_eq!(back.len(), 9014);
    assert_eq!(&back[12..], &frame[12..]);
    let counted = |s: &vadapt_dataplane::metrics::StatsSnapshot| {
        s.port_total(&ifname, |q| q.rx_bytes).unwrap() >= 9014
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = d.registry().snapshot();
    while !counted(&s) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        s = d.registry().snapshot();
    }
    let (tx, rx) = (
        s.port_total(&ifname, |q| q.tx_bytes).unwrap(),
        s.port_total(&ifname, |q| q.rx_bytes).unwrap(),
    );
    assert!(tx >= 9014 && rx >= 9014, "tx {tx} rx {rx}");
    let over = s
        .port_total(&ifname, |q| q.dropped.get("over_mtu").copied().unwrap_or(0))
        .unwrap();
    assert_eq!(over, 0);
    eprintln!("TAP {ifname} (MTU 9000): tx {tx} bytes, rx {rx} bytes, over_mtu {over}");
    d.shutdown();
}
