//! `vadapt serve --uplink` on one end of a veth pair whose far end is in a
//! network namespace the test makes (the "wire"), with an echo port behind
//! it: the far end's frames come back through the daemon. The daemon is
//! killed with SIGKILL (no chance to detach its XDP program): the program
//! stays, the next start replaces it, and traffic flows again; a SIGTERM
//! then leaves the interface without a program and without an owner
//! record. Needs root and `ip netns`; says so and does nothing elsewhere.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vadapt_wire::Mac;

mod common;
use common::tmpdir;

const SEND_AND_COUNT: &str = include_str!("../../tests/wire/send_and_count.py");

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Wire {
    ns: String,
    host: String,
    peer: String,
}

impl Wire {
    /// A wire whose names carry `tag` (each test its own: tests run at once).
    fn new(tag: &str) -> Option<Wire> {
        Self::with_queues(tag, 1)
    }

    /// As [`Wire::new`], each end with `queues` RX and TX queues.
    fn with_queues(tag: &str, queues: u32) -> Option<Wire> {
        let q = queues.to_string();
        let id = std::process::id() % 10_000;
        // Engineers sharing a host keep their names apart with a prefix.
        let pre = std::env::var("VADAPT_TEST_NET_PREFIX").unwrap_or_default();
        let w = Wire {
            ns: format!("{pre}vaw-{tag}{id}"),
            host: format!("{pre}vah-{tag}{id}"),
            peer: format!("{pre}vap-{tag}{id}"),
        };
        let ok = sh(&["ip", "netns", "add", &w.ns])
            && sh(&[
                "ip",
                "link",
                "add",
                &w.host,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                &w.peer,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ])
            && sh(&["ip", "link", "set", &w.peer, "netns", &w.ns])
            && sh(&["ip", "-n", &w.ns, "link", "set", &w.peer, "up"])
            && sh(&["ip", "link", "set", &w.host, "up"]);
        if !ok {
            eprintln!("skipped: cannot make a veth wire here (root and `ip netns` needed)");
            return None;
        }
        Some(w)
    }

    /// Frames sent to `dst` from the far end, and how many came back.
    fn echo_round(&self, dst: Mac, count: u32) -> (u32, u32) {
        let dst: String = dst.0.iter().map(|b| format!("{b:02x}")).collect();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "python3", "-c", SEND_AND_COUNT])
            .args([&self.peer, &dst, &count.to_string(), "60"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<u32> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        assert_eq!(
            v.len(),
            2,
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (v[0], v[1])
    }

    /// True if the host end has an XDP program attached.
    fn has_xdp(&self) -> bool {
        let out = Command::new("ip")
            .args(["link", "show", "dev", &self.host])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.host]);
        let _ = sh(&["ip", "netns", "del", &self.ns]);
    }
}

/// `vadapt serve` with the uplink and an echo; its log goes to `log`.
fn serve(dir: &Path, iface: &str, log: &str) -> Child {
    serve_uplink(dir, &format!("name=up0,iface={iface}"), log)
}

/// `vadapt serve --uplink SPEC` with an echo; its log goes to `log`.
fn serve_uplink(dir: &Path, spec: &str, log: &str) -> Child {
    let _ = std::fs::remove_file(dir.join("control.sock"));
    let log = std::fs::File::create(dir.join(log)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["serve", "--echo", "echo0", "--policy", "eekbp", "--uplink"])
        .arg(spec)
        .arg("--control")
        .arg(dir.join("control.sock"))
        .env("RUNTIME_DIRECTORY", dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_listening(&dir.join("control.sock"));
    child
}

/// Waits (20 s at most) until the daemon accepts on its control socket.
fn wait_listening(control: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(control).is_err() {
        assert!(Instant::now() < deadline, "the daemon never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

#[test]
fn traffic_flows_again_after_a_sigkill_and_the_program_goes_at_sigterm() {
    let Some(w) = Wire::new("k") else { return };
    let dir = tmpdir("uplink");
    let echo = Mac::from_name("echo0");
    let record = dir.path().join(format!("uplink-{}.pid", w.host));

    let mut first = serve(dir.path(), &w.host, "first.log");
    assert_eq!(w.echo_round(echo, 100), (100, 100), "through the uplink");
    assert!(w.has_xdp() && record.exists());
    let stats = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["stats", "--json", "--control"])
        .arg(dir.path().join("control.sock"))
        .output()
        .unwrap();
    let stats = String::from_utf8_lossy(&stats.stdout);
    assert!(
        stats.contains("\"up0/0\""),
        "the queue worker's counters: {stats}"
    );
    signal(&first, libc::SIGKILL);
    first.wait().unwrap();
    assert!(w.has_xdp(), "a killed daemon leaves its program");
    assert!(record.exists(), "and its owner record");

    let mut second = serve(dir.path(), &w.host, "second.log");
    assert_eq!(
        w.echo_round(echo, 100),
        (100, 100),
        "after the stale program was replaced"
    );
    signal(&second, libc::SIGTERM);
    assert!(second.wait().unwrap().success());
    let log = std::fs::read_to_string(dir.path().join("second.log")).unwrap();
    assert!(
        log.contains("replacing the AF_XDP program a stopped vadapt left"),
        "{log}"
    );
    assert!(log.contains("uplink open"), "{log}");
    assert!(!w.has_xdp(), "the program goes with the daemon");
    assert!(!record.exists(), "and its owner record");
}

/// `vadapt stats --json` of the daemon on `control`.
fn stats_json(control: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["stats", "--json", "--control"])
        .arg(control)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Port `name` of `stats` ([`stats_json`]).
fn port_in<'a>(stats: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    let ports = stats["ports"].as_array().expect("ports in the stats");
    ports.iter().find(|p| p["name"] == name).expect(name)
}

/// The uplink's policy named by `vadapt stats --json`.
fn uplink_policy(control: &Path) -> String {
    port_in(&stats_json(control), "up0")["policy"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `vadapt set-policy --port up0 P` reaches the uplink's queue workers
/// through the control socket: after each switch traffic still comes back
/// through the wire, and `vadapt stats` names the new policy. A bad port
/// name is refused with the names that run.
#[test]
fn set_policy_switches_the_uplink_and_stats_show_it() {
    let Some(w) = Wire::new("p") else { return };
    let dir = tmpdir("uplink-policy");
    let control = dir.path().join("control.sock");
    let echo = Mac::from_name("echo0");
    let mut d = serve(dir.path(), &w.host, "daemon.log");
    assert_eq!(uplink_policy(&control), "eekbp");
    for policy in ["busy-poll", "netap", "growshrink", "interrupt", "eekbp"] {
        let out = Command::new(env!("CARGO_BIN_EXE_vadapt"))
            .args(["set-policy", "--port", "up0", policy, "--control"])
            .arg(&control)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(w.echo_round(echo, 100), (100, 100), "{policy}");
        assert_eq!(uplink_policy(&control), policy);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["set-policy", "--port", "up9", "busy-poll", "--control"])
        .arg(&control)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("up9") && err.contains("up0"), "{err}");
    signal(&d, libc::SIGTERM);
    assert!(d.wait().unwrap().success());
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(log.contains("policy switched"), "{log}");
}

/// `ethtool -l IFACE`'s current RX count.
fn rx_channels(iface: &str) -> u32 {
    let out = Command::new("ethtool")
        .args(["-l", iface])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("Current hardware settings:")
        .nth(1)
        .and_then(|c| c.lines().find_map(|l| l.strip_prefix("RX:")))
        .and_then(|v| v.trim().parse().ok())
        .expect("ethtool -l answered")
}

/// A daemon with `--uplink ...,queues=2` on a veth with one RX channel
/// (four at most) raises it to two, says so in one line, and a SIGTERM
/// sets it back to one. One killed with SIGKILL leaves two (more queues:
/// traffic flows) and its record of the original; the next daemon on the
/// interface sets it back to one at its SIGTERM.
#[test]
fn the_daemon_restores_the_nics_channel_count_at_a_clean_stop() {
    if !sh(&["sh", "-c", "command -v ethtool >/dev/null"]) {
        eprintln!("skipped: no ethtool to check the counts with");
        return;
    }
    let Some(w) = Wire::with_queues("c", 4) else {
        return;
    };
    assert!(sh(&["ethtool", "-L", &w.host, "rx", "1", "tx", "1"]));
    // veth takes XDP only with as many RX queues as its peer has TX ones.
    assert!(sh(&[
        "ip", "netns", "exec", &w.ns, "ethtool", "-L", &w.peer, "rx", "1", "tx", "1"
    ]));
    let dir = tmpdir("uplink-channels");
    let spec = format!("name=up0,iface={},queues=2", w.host);
    let record = dir.path().join(format!("uplink-{}.channels", w.host));
    let mut killed = serve_uplink(dir.path(), &spec, "killed.log");
    assert_eq!(rx_channels(&w.host), 2);
    assert!(record.exists(), "the original count is recorded");
    signal(&killed, libc::SIGKILL);
    killed.wait().unwrap();
    assert_eq!(rx_channels(&w.host), 2, "a SIGKILL restores nothing");
    let mut d = serve_uplink(dir.path(), &spec, "daemon.log");
    assert_eq!(rx_channels(&w.host), 2);
    assert_eq!(w.echo_round(Mac::from_name("echo0"), 100), (100, 100));
    signal(&d, libc::SIGTERM);
    assert!(d.wait().unwrap().success());
    assert_eq!(
        rx_channels(&w.host),
        1,
        "the killed daemon's original, restored at the clean stop"
    );
    assert!(!record.exists(), "and its record gone");
    let killed_log = std::fs::read_to_string(dir.path().join("killed.log")).unwrap();
    assert_eq!(
        killed_log.matches("NIC channel count raised").count(),
        1,
        "one line: {killed_log}"
    );
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("a stopped vadapt left the NIC's channel count raised"),
        "{log}"
    );
    assert!(log.contains("NIC channel count restored"), "{log}");
}

/// `vadapt serve --queue-workers per-nq-core`: the uplink's NIC queue is a
/// queue set of the NQ pool (`vadapt cores` lists `up0/0` among a pool
/// worker's ports), and the wire's frames come back through it.
#[test]
fn the_nq_pool_of_the_daemon_serves_the_uplinks_queue() {
    let Some(w) = Wire::new("n") else { return };
    let dir = tmpdir("uplink-pool");
    let control = dir.path().join("control.sock");
    let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
    let mut d = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args([
            "serve",
            "--echo",
            "echo0",
            "--policy",
            "interrupt",
            "--uplink",
        ])
        .arg(format!("name=up0,iface={}", w.host))
        .args(["--cores-cpus", "0", "--queue-workers", "per-nq-core"])
        .arg("--control")
        .arg(&control)
        .env("RUNTIME_DIRECTORY", dir.path())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_listening(&control);
    assert_eq!(w.echo_round(Mac::from_name("echo0"), 100), (100, 100));
    let out = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["cores", "--json", "--control"])
        .arg(&control)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let served: Vec<String> = v["nq_workers"]
        .as_array()
        .expect("the pool's workers")
        .iter()
        .flat_map(|w| w["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    assert!(served.contains(&"up0/0".to_string()), "{v}");
    signal(&d, libc::SIGTERM);
    assert!(d.wait().unwrap().success());
    assert!(!w.has_xdp(), "the program goes with the daemon");
}

const COUNT_FRAMES: &str = include_str!("../../tests/wire/count_frames.py");

/// The synthetic guest on a VM port streams at a fixed rate to a MAC the
/// switch does not know: every frame is flooded to the uplink, leaves on
/// the host end of the wire, and is counted at its far end by the
/// namespace's kernel (AF_PACKET), as many as the guest put on its ring;
/// the daemon's counters agree (the VM port took them, the uplink's queue
/// sent them).
#[test]
fn the_synthetic_guest_at_rate_reaches_the_wire_frame_for_frame() {
    use std::io::{BufRead, BufReader};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use vadapt_guest::{Guest, GuestConfig, Load};

    let Some(w) = Wire::new("g") else { return };
    let dir = tmpdir("uplink-guest");
    let sock = dir.path().join("g.sock");
    let control = dir.path().join("control.sock");
    let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
    let mut d = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["serve", "--policy", "eekbp", "--vm"])
        .arg(format!(
            "name=g,socket={},mac=52:54:00:00:00:07",
            sock.display()
        ))
        .arg("--uplink")
        .arg(format!("name=up0,iface={}", w.host))
        .arg("--control")
        .arg(&control)
        .env("RUNTIME_DIRECTORY", dir.path())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_listening(&control);

    const RATE: f64 = 20_000.0;
    const MS: u64 = 1_000;
    let mut counter = Command::new("ip")
        .args(["netns", "exec", &w.ns, "python3", "-c", COUNT_FRAMES])
        .args([&w.peer, &(2 * RATE as u64).to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(counter.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    let mut cfg = GuestConfig::new(&sock);
    cfg.load = Load::Rate { pps: RATE };
    cfg.dst_mac = [0x02, 0, 0, 0, 0xaa, 0x01];
    cfg.duration = Duration::from_millis(MS);
    cfg.exit_cost_ns = 0;
    let report = Guest::connect(cfg)
        .expect("the guest connects")
        .run(Arc::new(AtomicBool::new(false)))
        .expect("the guest runs");
    assert!(report.error.is_none(), "{:?}", report.error);
    let sent = report.totals.sent_packets;
    assert!(sent as f64 > 0.5 * RATE, "the guest sent only {sent}");

    // The counter stops 3 s after the last frame.
    line.clear();
    out.read_line(&mut line).unwrap();
    counter.wait().unwrap();
    let counted: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(
        counted.first(),
        Some(&sent),
        "frames at the far end: {line}"
    );

    let v = stats_json(&control);
    signal(&d, libc::SIGTERM);
    assert!(d.wait().unwrap().success());
    let sum = |port: &str, field: &str| -> u64 {
        port_in(&v, port)["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q[field].as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum("g", "tx_packets"), sent, "the VM port took them");
    // The uplink's rx is what it took from the switch for the wire (the
    // namespace's kernel may add a frame or two of its own the other way).
    assert_eq!(sum("up0", "rx_packets"), sent, "the uplink sent them");
}

/// `up0`'s drops for `reason` (`vadapt stats --json`), every queue.
fn uplink_drops(control: &Path, reason: &str) -> u64 {
    let v = stats_json(control);
    let queues = port_in(&v, "up0")["queues"].as_array().unwrap();
    queues
        .iter()
        .map(|q| q["dropped"][reason].as_u64().unwrap_or(0))
        .sum()
}

/// `vadapt set-limits up0 ARGS`, which must succeed.
fn set_uplink_limits(control: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["set-limits", "up0", "--control"])
        .arg(control)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An uplink's rate limits act on what the wire sends into the switch:
/// storm control from the `--uplink` spec keeps broadcast from being
/// flooded (`storm`), a bit-rate policer set at run time drops what is
/// over its burst (`policed`), and with the limits removed everything
/// passes again, on queue workers that were never restarted.
#[test]
fn an_uplink_polices_what_the_wire_sends_and_takes_limits_at_run_time() {
    let Some(w) = Wire::new("l") else { return };
    let dir = tmpdir("uplink-limits");
    let control = dir.path().join("control.sock");
    let echo = Mac::from_name("echo0");
    let spec = format!("name=up0,iface={},storm_control_pps=5", w.host);
    let mut d = serve_uplink(dir.path(), &spec, "daemon.log");
    // Broadcast reaches the echo (which answers to us) only as far as
    // storm control lets it be flooded: a burst of 5, 5 a second.
    let (sent, back) = w.echo_round(Mac::BROADCAST, 200);
    assert_eq!(sent, 200);
    assert!(back <= 20, "{back} broadcasts flooded, about 5 may be");
    assert!(uplink_drops(&control, "storm") >= 180);
    // Unicast to the echo is not a flood: storm control leaves it alone.
    assert_eq!(w.echo_round(echo, 100), (100, 100));
    // 1 kbit/s with a burst of 13 kb: 35 frames of 60 bytes (368 bits
    // each without the Ethernet header), then about 3 a second.
    set_uplink_limits(&control, &["--rate-kbps", "1", "--burst-kb", "13"]);
    std::thread::sleep(Duration::from_millis(100));
    let (sent, back) = w.echo_round(echo, 200);
    assert_eq!(sent, 200);
    assert!(back <= 45, "{back} frames passed the policer");
    assert!(uplink_drops(&control, "policed") >= 150);
    // No limits: all of them pass.
    set_uplink_limits(&control, &[]);
    assert_eq!(w.echo_round(echo, 100), (100, 100));
    signal(&d, libc::SIGTERM);
    assert!(d.wait().unwrap().success());
}
