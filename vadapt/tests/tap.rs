//! The TAP port: a frame the host sends on the TAP interface crosses the
//! switch to an echo port and comes back to the host, MACs swapped.
//!
//! Needs root and `/dev/net/tun` (both present on the CI machines); where
//! either is missing the test says so and passes without checking anything.

use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, PortLimits, TapPortConfig};
use vadapt_dataplane::metrics::StatsSnapshot;
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

/// A TAP port's rate limits act on what the host sends into the switch:
/// a packet-rate policer drops (`policed`) what is over its bucket, removed
/// at run time it drops nothing more, and storm control set at run time
/// keeps broadcast from being flooded (`storm`), all on one reader thread
/// that is never restarted.
#[test]
fn a_tap_port_polices_what_the_host_sends_and_takes_limits_at_run_time() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x07]);
    let tmp = tempfile::Builder::new()
        .prefix("vadapt-tap-limits-")
        .tempdir()
        .unwrap();
    let ifname = format!("vadl{}", std::process::id() % 100_000);
    // 1000 frames/s, a burst of 1000 frames.
    let policed = PortLimits {
        ingress_policing_kpkts_rate: 1,
        ingress_policing_kpkts_burst: 1,
        ..PortLimits::NONE
    };
    let cfg = DaemonConfig {
        tap: vec![TapPortConfig {
            limits: policed,
            ..TapPortConfig::new(ifname.clone())
        }],
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        control: tmp.path().join("control.sock"),
        ..DaemonConfig::default()
    };
    let start = Instant::now();
    let d = Daemon::start(cfg).expect("daemon with a policed TAP port starts");
    let sock = RawSocket::bind(&ifname).expect("raw socket on the TAP interface");
    let payload = [0x5au8; 46];
    let unicast = ethernet_frame(SINK, HOST, ETHERTYPE_EXPERIMENTAL, &payload);
    let broadcast = ethernet_frame(Mac::BROADCAST, HOST, ETHERTYPE_EXPERIMENTAL, &payload);
    // Paced (50 frames a millisecond at most) so that the TAP's queue in
    // the kernel does not overflow before the reader takes the frames.
    let send = |frame: &[u8], n: usize| {
        for i in 0..n {
            assert_eq!(sock.send(frame), frame.len() as isize);
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    let (tx, drops) = (
        |s: &StatsSnapshot| s.port_total(&ifname, |q| q.tx_packets).unwrap(),
        |s: &StatsSnapshot, why: &str| {
            let n = s.port_total(&ifname, |q| q.dropped.get(why).copied().unwrap_or(0));
            n.unwrap()
        },
    );
    // Counters once the reader has taken `n` frames (or after 5 s).
    let read = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = d.registry().snapshot();
            let taken = tx(&s) + drops(&s, "policed") + drops(&s, "storm");
            if taken >= n || Instant::now() > deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    send(&unicast, 3000);
    let elapsed = start.elapsed();
    let s = read(3000);
    let (passed, dropped) = (tx(&s), drops(&s, "policed"));
    // The kernel may send a frame of its own (IPv6 router solicitation)
    // and drop some of ours when its queue is full: bounds, not counts.
    let most = 1000 + (1000.0 * elapsed.as_secs_f64()).ceil() as u64 + 5;
    assert!(passed <= most, "{passed} frames passed, at most {most} may");
    assert!(dropped >= 3000 - most - 100, "{dropped} policed of 3000");
    assert!(
        s.port_total("sink0", |q| q.rx_packets).unwrap() <= passed,
        "what the policer dropped never reached the sink"
    );

    // No limits now: nothing more is policed, on the same reader.
    d.set_limits(&ifname, PortLimits::NONE).unwrap();
    std::thread::sleep(Duration::from_millis(250)); // the reader's next wake-up
    send(&unicast, 500);
    let s = read(passed + dropped + 500);
    assert_eq!(drops(&s, "policed"), dropped, "none policed without limits");
    assert!(tx(&s) >= passed + 500, "all 500 passed");

    // Storm control: 10 floods a second, a burst of 10.
    let storm = PortLimits {
        storm_control_pps: 10,
        ..PortLimits::NONE
    };
    d.set_limits(&ifname, storm).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let before = s.port_total("sink0", |q| q.rx_packets).unwrap();
    send(&broadcast, 300);
    let s = read(tx(&s) + 300);
    let flooded = s.port_total("sink0", |q| q.rx_packets).unwrap() - before;
    assert!(
        flooded <= 20,
        "{flooded} broadcasts flooded, at most ~10 may"
    );
    assert!(
        drops(&s, "storm") >= 250,
        "storm drops: {}",
        drops(&s, "storm")
    );
    assert_eq!(drops(&s, "policed"), dropped);
    // A sink or echo port has no limits to set.
    let e = d.set_limits("sink0", storm).unwrap_err().to_string();
    assert!(e.contains("sink port"), "{e}");
    d.shutdown();
}
