//! `vadapt guest ...`: the command-line face of the synthetic guest.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vadapt_wire::Mac;

use crate::config::{
    ConfigError, GuestConfig, Mode, PackedRing, DEFAULT_EXIT_COST_NS, DEFAULT_WRITE_COST_NS,
    DEFAULT_WRITE_COST_NS_PER_KIB,
};
use crate::guest::{error_chain, Guest};
use crate::load::{Load, Pacing, RateSpec};
use crate::metrics::GuestReport;

/// Flags of `vadapt guest`.
#[derive(Debug, Clone, clap::Args)]
pub struct GuestArgs {
    /// vhost-user socket of the backend (the guest connects to it as the frontend).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// Sending threads (netperf threads), each one flow on its own queue pair when the
    /// backend offers enough pairs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: u32,
    /// Message size: bytes of L2 payload (the frame adds a 14-byte Ethernet header), at
    /// most 9000 and at most the MTU the backend offers (`VIRTIO_NET_F_MTU`); over 1500
    /// only with mergeable RX buffers. With `--mode tcp-stream`, bytes of application data
    /// per write.
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    pub size: u32,
    /// Offered load of the whole guest: `closed` (send whenever the ring has room), a packet
    /// rate (`100k`, `1Mpps`) or a bit rate of Ethernet frames (`2Gbit`). With
    /// `--mode tcp-stream` a packet rate counts messages and a bit rate application bytes.
    #[arg(long, default_value = "closed", value_parser = parse_rate, value_name = "RATE")]
    pub rate: RateArg,
    /// With `--mode stream` and a `--rate`: how the sender waits for its next packets.
    /// `exact` sends each packet at its time, busy-waiting through gaps under 100 µs as Linux
    /// pktgen does (from about 10k packets/s on the thread never sleeps); `burst` sleeps until
    /// enough packets are due to span 100 µs (at most 64) and sends them back to back, as
    /// the `fq` qdisc releases what falls within its timer slack: the same rate, with the
    /// vCPU idle between bursts instead of spinning.
    #[arg(long, default_value = "exact", value_parser = parse_pacing, value_name = "PACING")]
    pub pacing: Pacing,
    /// Traffic pattern: `stream` (one way, one raw Ethernet frame per message: the
    /// packet-rate workload), `tcp-stream` (one way, what a Linux TCP sender with TSO puts on
    /// the ring: messages coalesced into segments of up to 64 KiB with checksum and
    /// segmentation offloaded to the backend, which must offer VIRTIO_NET_F_CSUM and
    /// VIRTIO_NET_F_HOST_TSO4, else MSS-sized frames), `rr` (request/response, latency
    /// percentiles) or `echo` (answer another guest's `rr` requests).
    #[arg(long, default_value = "stream", value_parser = parse_mode, value_name = "MODE")]
    pub mode: Mode,
    /// How long to run: `10s`, `500ms`, `2m`, or plain seconds.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "TIME")]
    pub duration: Duration,
    /// Emulated CPU cost of each kick (VM exit) and each handled call (interrupt injection),
    /// busy-waited on the sending thread; 0 turns the emulation off.
    #[arg(long, default_value_t = DEFAULT_EXIT_COST_NS, value_name = "NS")]
    pub exit_cost_ns: u64,
    /// With `--mode tcp-stream`: emulated CPU cost of each application write of `--size`
    /// bytes (the `send()` system call, the copy into the socket, TCP's bookkeeping),
    /// busy-waited on the sending thread as the message is queued; 0 with
    /// `--write-cost-ns-per-kib 0` = an infinitely fast writer, every segment full. A slow
    /// writer's segments carry what was written since the ring last had room. Default 585,
    /// `send()` measured on loopback (README, `--example write_cost`). Refused in other modes.
    #[arg(long, value_name = "NS")]
    pub write_cost_ns: Option<u64>,
    /// With `--mode tcp-stream`: the part of each write's cost that grows with its size, ns
    /// per KiB (default 464, from the same measurement). Refused in other modes.
    #[arg(long, value_name = "NS")]
    pub write_cost_ns_per_kib: Option<u64>,
    /// The guest's MAC address (default: the device's, else 02:00:00:00:00:01).
    #[arg(long, value_parser = parse_mac, value_name = "MAC")]
    pub mac: Option<[u8; 6]>,
    /// Destination MAC address of every frame.
    #[arg(long, default_value = "02:00:00:00:00:02", value_parser = parse_mac, value_name = "MAC")]
    pub dst_mac: [u8; 6],
    /// Queue pairs to use (default: one per thread, capped by the backend).
    #[arg(long, value_name = "N")]
    pub queues: Option<u16>,
    /// Descriptors per virtqueue (power of two, or any size up to 32768 with `--packed on`;
    /// QEMU allows up to 1024 with `tx_queue_size`/`rx_queue_size`).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub ring_size: u16,
    /// Packets per publish/kick decision (1 = one sendmsg per packet; more emulates
    /// `xmit_more` batching).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub tx_batch: u16,
    /// Serve a QMP socket here, as QEMU's `-qmp unix:PATH,server=on,wait=off`: it answers
    /// `qmp_capabilities`, `query-cpus-fast` (the sending threads' host thread ids, one per
    /// "vCPU"), `stop` / `cont` (pause and resume the sending threads) and `query-status`, so
    /// that the daemon's core manager (`--vm ...,qmp=PATH`) finds and pauses this guest as it
    /// does a QEMU VM. The socket file is removed when the guest exits.
    #[arg(long, value_name = "PATH")]
    pub qmp: Option<PathBuf>,
    /// Serve a QEMU guest agent socket here: `guest-get-vcpus` / `guest-set-vcpus` (an
    /// offline vCPU's sending thread stops), and `guest-exec` of `ethtool -L IFACE combined
    /// N` (succeeds only for the queue pairs in use), so that the daemon's core manager
    /// (`--vm ...,qga=PATH`) drives this guest's vSPACE-Guest side.
    #[arg(long, value_name = "PATH")]
    pub qga: Option<PathBuf>,
    /// With `--mode rr`: every `--report-period`, send the P95 of the round trips completed
    /// in that period to the daemon's control socket at PATH (`cores-report`, the sample
    /// vSPACE's threshold explorer uses). A failing report is logged (rate-limited), never
    /// fatal.
    #[arg(long, value_name = "PATH")]
    pub cores_control: Option<PathBuf>,
    /// Length of a P95 reporting period (`--cores-control`); the core manager's is 100 ms.
    #[arg(long, default_value = "100ms", value_parser = parse_duration, value_name = "TIME")]
    pub report_period: Duration,
    /// Log dirty pages as QEMU does during a live migration: ack `VHOST_F_LOG_ALL`, give the
    /// backend a shared log, take its marks every 50 ms; at the end, check that every page
    /// of the used rings and receive buffers that changed was marked (the report's
    /// `dirty_log`).
    #[arg(long)]
    pub dirty_log: bool,
    /// Packed virtqueues (`VIRTIO_F_RING_PACKED`): `off` (the default, QEMU's own
    /// `packed=off` default) always drives split rings; `auto` drives packed rings when the
    /// backend offers them and split ones otherwise, as a Linux guest does on a device with
    /// `packed=on`; `on` refuses a backend that does not offer them. The report says which
    /// kind was negotiated.
    #[arg(long, default_value = "off", value_parser = parse_packed, value_name = "auto|on|off")]
    pub packed: PackedRing,
    /// Receive-side scaling: when the backend offers `VIRTIO_NET_F_RSS`, set this
    /// indirection table (receive queue numbers, comma-separated, a power of two of them)
    /// through the control queue, as `ethtool -X` makes Linux do; the report then shows
    /// frames per receive queue and the device's answer (`ctrl_rss`).
    #[arg(long, value_delimiter = ',', value_name = "Q,Q,...")]
    pub rss_table: Option<Vec<u16>>,
    /// With `--rss-table`: the Toeplitz key, hex (default: the RSS specification's
    /// 40-byte example key, Linux's and DPDK's too).
    #[arg(long, value_parser = parse_key, value_name = "HEX")]
    pub rss_key: Option<HexKey>,
    /// With `--rss-table`: hash types, comma-separated among ipv4, tcp4, udp4, ipv6, tcp6,
    /// udp6 (default: all six).
    #[arg(long, value_delimiter = ',', value_parser = parse_hash_type, value_name = "TYPES")]
    pub rss_hash_types: Option<Vec<u32>>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A parsed `--rate` (kept apart from the load because bit rates need the message size).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateArg(pub RateSpec);

fn parse_rate(s: &str) -> Result<RateArg, String> {
    RateSpec::parse(s).map(RateArg).map_err(|e| e.to_string())
}

/// Parses `--mode`: `stream`, `tcp-stream`, `rr` (or `request-response`), `echo`.
pub fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "stream" => Ok(Mode::Stream),
        "tcp-stream" => Ok(Mode::TcpStream),
        "rr" | "request-response" => Ok(Mode::RequestResponse),
        "echo" => Ok(Mode::Echo),
        _ => Err(format!(
            "`{s}` is not a mode: use stream, tcp-stream, rr or echo"
        )),
    }
}

/// Parses `--packed`: `auto`, `on` or `off`.
pub fn parse_packed(s: &str) -> Result<PackedRing, String> {
    match s {
        "auto" => Ok(PackedRing::Auto),
        "on" => Ok(PackedRing::On),
        "off" => Ok(PackedRing::Off),
        _ => Err(format!(
            "`{s}` is not a packed-ring choice: use auto, on or off"
        )),
    }
}

/// Parses `exact` or `burst`.
pub fn parse_pacing(s: &str) -> Result<Pacing, String> {
    match s {
        "exact" => Ok(Pacing::Exact),
        "burst" => Ok(Pacing::Burst),
        _ => Err(format!("`{s}` is not a pacing: use exact or burst")),
    }
}

/// Parses `10s`, `500ms`, `250us`, `2m`, `1h` or a plain number of seconds (`1.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration: use e.g. 10s"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("`{s}` is not a duration: use e.g. 10s, 500ms, 2m")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is out of range"))
}

/// A `--rss-key`: bytes given in hex (a type of its own, so that clap takes it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HexKey(pub Vec<u8>);

fn parse_key(s: &str) -> Result<HexKey, String> {
    parse_hex(s).map(HexKey)
}

/// Parses a key in hex (`6d5a56da...`, `:` or `-` between bytes allowed).
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = s.bytes().filter(|b| !matches!(b, b':' | b'-')).collect();
    if digits.len() % 2 != 0 {
        return Err(format!("`{s}` is not hex bytes: odd number of digits"));
    }
    digits
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("`{s}` is not hex bytes"))
        })
        .collect()
}

/// Parses one RSS hash type name into its `VIRTIO_NET_RSS_HASH_TYPE_*` bit.
pub fn parse_hash_type(s: &str) -> Result<u32, String> {
    use vadapt_wire::rss_config::*;
    Ok(match s {
        "ipv4" => HASH_IPV4,
        "tcp4" => HASH_TCPV4,
        "udp4" => HASH_UDPV4,
        "ipv6" => HASH_IPV6,
        "tcp6" => HASH_TCPV6,
        "udp6" => HASH_UDPV6,
        _ => {
            return Err(format!(
                "`{s}` is not a hash type: use ipv4, tcp4, udp4, ipv6, tcp6, udp6"
            ))
        }
    })
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`), as [`Mac`]'s `FromStr` does.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    s.parse::<Mac>().map(|m| m.0).map_err(|e| e.to_string())
}

impl GuestArgs {
    /// The configuration these flags describe, validated.
    pub fn to_config(&self) -> Result<GuestConfig, ConfigError> {
        let load = match (self.mode, self.rate.0) {
            // TCP stream: a bit rate is application bytes, `size` of them per message.
            (Mode::TcpStream, RateSpec::Bps(bps)) => Load::Rate {
                pps: bps / (8.0 * f64::from(self.size.max(1))),
            },
            (_, rate) => rate.to_load(self.size),
        };
        let write_cost_given = self.write_cost_ns.is_some() || self.write_cost_ns_per_kib.is_some();
        if write_cost_given && self.mode != Mode::TcpStream {
            return Err(ConfigError::WriteCostNeedsTcpStream);
        }
        let cfg = GuestConfig {
            threads: self.threads,
            size: self.size,
            load,
            pacing: self.pacing,
            mode: self.mode,
            duration: self.duration,
            exit_cost_ns: self.exit_cost_ns,
            write_cost_ns: self.write_cost_ns.unwrap_or(DEFAULT_WRITE_COST_NS),
            write_cost_ns_per_kib: self
                .write_cost_ns_per_kib
                .unwrap_or(DEFAULT_WRITE_COST_NS_PER_KIB),
            mac: self.mac,
            dst_mac: self.dst_mac,
            queues: self.queues,
            ring_size: self.ring_size,
            tx_batch: self.tx_batch,
            qmp: self.qmp.clone(),
            qga: self.qga.clone(),
            cores_control: self.cores_control.clone(),
            report_period: self.report_period,
            dirty_log: self.dirty_log,
            packed: self.packed,
            rss: self.rss_request()?,
            ..GuestConfig::new(self.socket.clone())
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The RSS config `--rss-table`, `--rss-key` and `--rss-hash-types` describe.
    fn rss_request(&self) -> Result<Option<crate::config::RssRequest>, ConfigError> {
        let Some(table) = &self.rss_table else {
            if self.rss_key.is_some() || self.rss_hash_types.is_some() {
                return Err(ConfigError::RssWithoutTable);
            }
            return Ok(None);
        };
        Ok(Some(crate::config::RssRequest {
            key: self
                .rss_key
                .clone()
                .map(|k| k.0)
                .unwrap_or_else(|| vadapt_wire::toeplitz::DEFAULT_KEY.to_vec()),
            table: table.clone(),
            hash_types: self
                .rss_hash_types
                .as_ref()
                .map_or(vadapt_wire::rss_config::HASH_ALL_BUT_EX, |t| {
                    t.iter().fold(0, |a, b| a | b)
                }),
            unclassified_queue: 0,
        }))
    }
}

/// Set by SIGINT/SIGTERM; the watcher thread forwards it to the run's stop flag.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Relaxed);
}

/// Runs `vadapt guest` to completion: connect, run, print the report (table or JSON).
/// Exit code 0 on success, 1 when the configuration is refused, the connection fails or the
/// run ended early (the report up to then is still printed).
pub fn run_cli(args: GuestArgs) -> ExitCode {
    let cfg = match args.to_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let guest = match Guest::connect(cfg.clone()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    // SAFETY: `on_signal` only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let forward = Arc::clone(&stop);
    let done = Arc::new(AtomicBool::new(false));
    let done2 = Arc::clone(&done);
    let watcher = std::thread::spawn(move || {
        while !done2.load(Ordering::Relaxed) {
            if SIGNALLED.load(Ordering::Relaxed) {
                forward.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let result = guest.run(stop);
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    match result {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => eprintln!("error: cannot encode the report: {e}"),
                }
            } else {
                print!("{}", render_table(&cfg, &report));
            }
            if let Some(e) = &report.error {
                eprintln!("error: run ended early: {e}");
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The human-readable report.
pub fn render_table(cfg: &GuestConfig, r: &GuestReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(
        s,
        "guest {} -> {}: {} thread(s) on {} queue pair(s) ({} rings), {}-byte messages, {:?}, {:.2} s\n\
         (sent pkts are buffers put on the TX rings: frames, or TSO segments in tcp-stream)",
        r.mac,
        cfg.socket.display(),
        cfg.threads,
        r.queue_pairs,
        r.ring.name(),
        cfg.size,
        cfg.mode,
        secs
    );
    let t = &r.totals;
    let _ = writeln!(
        s,
        "sent     {:>14} pkts {:>16} B  {:>10.3} Mpps {:>9.3} Gbit/s",
        t.sent_packets,
        t.sent_bytes,
        t.sent_packets as f64 / secs / 1e6,
        t.sent_bytes as f64 * 8.0 / secs / 1e9
    );
    let _ = writeln!(
        s,
        "messages {:>14} msgs {:>16} B  {:>10.3} Mmsg/s {:>7.3} Gbit/s of payload",
        t.sent_messages,
        t.sent_payload_bytes,
        t.sent_messages as f64 / secs / 1e6,
        t.sent_payload_bytes as f64 * 8.0 / secs / 1e9
    );
    let _ = writeln!(
        s,
        "received {:>14} pkts {:>16} B  {:>10.3} Mpps {:>9.3} Gbit/s",
        t.recv_packets,
        t.recv_bytes,
        t.recv_packets as f64 / secs / 1e6,
        t.recv_bytes as f64 * 8.0 / secs / 1e9
    );
    if r.rx_queue_packets.len() > 1 {
        let per: Vec<String> = r.rx_queue_packets.iter().map(u64::to_string).collect();
        let _ = writeln!(s, "received per RX queue: {}", per.join(" "));
    }
    if cfg.rss.is_some() {
        let _ = writeln!(s, "RSS config on the control queue: {:?}", r.ctrl_rss);
    }
    let _ = writeln!(
        s,
        "kicks {} (tx {}, rx {})  calls {} (tx {}, rx {})  ring-full stalls {}  wake timeouts {}",
        t.kicks,
        t.tx_kicks,
        t.rx_kicks,
        t.calls,
        t.tx_calls,
        t.rx_calls,
        t.ring_full_stalls,
        t.tx_wake_timeouts
    );
    let _ = writeln!(
        s,
        "cpu      {:.2} s in sending threads ({:.0} % of {} thread(s))",
        r.cpu_seconds,
        100.0 * r.cpu_seconds / secs / f64::from(cfg.threads.max(1)),
        cfg.threads
    );
    if let Some(c) = &r.cores_reports {
        let _ = writeln!(
            s,
            "p95 reports to the daemon: {} sent, {} failed, {} periods without a round trip{}",
            c.sent,
            c.failed,
            c.empty_periods,
            c.last_error
                .as_ref()
                .map(|e| format!(" (last error: {e})"))
                .unwrap_or_default()
        );
    }
    if let Some(d) = &r.dirty_log {
        let _ = writeln!(
            s,
            "dirty log {} marks in {} syncs; device-written pages changed {}, never marked {}{}",
            d.marks_synced,
            d.syncs,
            d.device_pages_changed,
            d.device_pages_missed,
            if d.device_pages_missed > 0 {
                " (a migration would have left them stale)"
            } else {
                ""
            }
        );
    }
    if let Some(l) = r.latency {
        let _ = writeln!(
            s,
            "latency  p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  max {:.1} us  ({} round trips, {} lost)",
            l.p50 as f64 / 1e3,
            l.p99 as f64 / 1e3,
            l.p999 as f64 / 1e3,
            l.max as f64 / 1e3,
            l.count,
            t.lost_requests
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: GuestArgs,
    }

    fn parse(argv: &[&str]) -> Result<GuestArgs, String> {
        let mut full = vec!["vadapt-guest"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full)
            .map(|c| c.args)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn full_command_line() {
        let a = parse(&[
            "--socket",
            "/tmp/a.sock",
            "--threads",
            "3",
            "--size",
            "128",
            "--rate",
            "1Mpps",
            "--mode",
            "rr",
            "--duration",
            "500ms",
            "--exit-cost-ns",
            "0",
            "--mac",
            "02:00:00:00:00:0a",
            "--dst-mac",
            "02-00-00-00-00-0b",
            "--json",
        ])
        .unwrap();
        let c = a.to_config().unwrap();
        assert_eq!(c.threads, 3);
        assert_eq!(c.size, 128);
        assert_eq!(c.load, Load::Rate { pps: 1e6 });
        assert_eq!(c.mode, Mode::RequestResponse);
        assert_eq!(c.duration, Duration::from_millis(500));
        assert_eq!(c.exit_cost_ns, 0);
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(c.dst_mac, [2, 0, 0, 0, 0, 11]);
        assert!(a.json);
    }

    #[test]
    fn rss_flags_make_the_request_and_bad_ones_are_refused() {
        let c = parse(&["--socket", "/s", "--rss-table", "0,1,2,3"])
            .unwrap()
            .to_config()
            .unwrap();
        let r = c.rss.expect("an RSS request");
        assert_eq!(r.table, vec![0, 1, 2, 3]);
        assert_eq!(r.key, vadapt_wire::toeplitz::DEFAULT_KEY.to_vec());
        assert_eq!(r.hash_types, 0x3f);
        let c = parse(&[
            "--socket",
            "/s",
            "--rss-table",
            "1,0",
            "--rss-key",
            "01:02:03:04",
            "--rss-hash-types",
            "ipv4,udp4",
        ])
        .unwrap()
        .to_config()
        .unwrap();
        let r = c.rss.unwrap();
        assert_eq!((r.key, r.hash_types), (vec![1, 2, 3, 4], 0b101));
        assert_eq!(
            parse(&["--socket", "/s"]).unwrap().to_config().unwrap().rss,
            None
        );
        let e = parse(&["--socket", "/s", "--rss-table", "0,1,2"])
            .unwrap()
            .to_config();
        assert_eq!(e, Err(ConfigError::RssTable(3)));
        let e = parse(&["--socket", "/s", "--rss-key", "00"])
            .unwrap()
            .to_config();
        assert_eq!(e, Err(ConfigError::RssWithoutTable));
        assert!(parse_hex("0g").is_err() && parse_hex("012").is_err());
        assert!(parse_hash_type("tcp4_ex").is_err());
    }

    #[test]
    fn qmp_and_p95_report_flags() {
        let c = parse(&[
            "--socket",
            "/s",
            "--mode",
            "rr",
            "--qmp",
            "/tmp/g.qmp",
            "--qga",
            "/tmp/g.qga",
            "--cores-control",
            "/run/vadapt.sock",
            "--report-period",
            "250ms",
        ])
        .unwrap()
        .to_config()
        .unwrap();
        assert_eq!(c.qmp, Some(PathBuf::from("/tmp/g.qmp")));
        assert_eq!(c.qga, Some(PathBuf::from("/tmp/g.qga")));
        assert_eq!(c.cores_control, Some(PathBuf::from("/run/vadapt.sock")));
        assert_eq!(c.report_period, Duration::from_millis(250));
        let e = parse(&["--socket", "/s", "--cores-control", "/c"])
            .unwrap()
            .to_config()
            .unwrap_err();
        assert!(e.to_string().starts_with("--cores-control"), "{e}");
    }

    #[test]
    fn defaults() {
        let c = parse(&["--socket", "/s"]).unwrap().to_config().unwrap();
        assert_eq!(c, GuestConfig::new("/s"));
        assert_eq!(c.packed, PackedRing::Off);
    }

    #[test]
    fn packed_ring_choice() {
        for (arg, want) in [
            ("auto", PackedRing::Auto),
            ("on", PackedRing::On),
            ("off", PackedRing::Off),
        ] {
            let c = parse(&["--socket", "/s", "--packed", arg]).unwrap();
            assert_eq!(c.to_config().unwrap().packed, want);
        }
        let e = parse(&["--socket", "/s", "--packed", "yes"]).unwrap_err();
        assert!(e.to_string().contains("use auto, on or off"), "{e}");
    }

    #[test]
    fn bad_flags_are_one_line_errors_naming_the_flag() {
        let e = parse(&["--socket", "/s", "--threads", "0"])
            .unwrap()
            .to_config()
            .unwrap_err();
        assert_eq!(e.to_string(), "--threads must be at least 1");
        let e = parse(&["--socket", "/s", "--rate", "0"]).unwrap_err();
        assert!(e.contains("--rate") && e.contains("positive"), "{e}");
        let e = parse(&["--socket", "/s", "--rate", "lots"]).unwrap_err();
        assert!(e.contains("--rate"), "{e}");
        let e = parse(&["--socket", "/s", "--mac", "zz"]).unwrap_err();
        assert!(e.contains("--mac"), "{e}");
        let e = parse(&["--socket", "/s", "--duration", "10 parsecs"]).unwrap_err();
        assert!(e.contains("--duration"), "{e}");
        let e = parse(&["--socket", "/s", "--size", "9999"])
            .unwrap()
            .to_config()
            .unwrap_err();
        assert!(e.to_string().starts_with("--size"));
        assert!(parse(&["--threads", "1"]).unwrap_err().contains("--socket"));
    }

    #[test]
    fn burst_pacing_only_for_a_paced_stream() {
        let cfg = |extra: &[&str]| {
            let mut argv = vec!["--socket", "/s"];
            argv.extend_from_slice(extra);
            parse(&argv).and_then(|a| a.to_config().map_err(|e| e.to_string()))
        };
        assert_eq!(cfg(&[]).unwrap().pacing, Pacing::Exact);
        let c = cfg(&["--rate", "300k", "--pacing", "burst"]).unwrap();
        assert_eq!(c.pacing, Pacing::Burst);
        for refused in [
            &["--pacing", "burst"][..],
            &["--rate", "1k", "--mode", "rr", "--pacing", "burst"],
            &["--rate", "1k", "--mode", "tcp-stream", "--pacing", "burst"],
        ] {
            let e = cfg(refused).unwrap_err();
            assert!(e.contains("--pacing burst needs"), "{refused:?}: {e}");
        }
        let e = cfg(&["--rate", "1k", "--pacing", "sometimes"]).unwrap_err();
        assert!(e.contains("not a pacing"), "{e}");
    }

    #[test]
    fn tcp_stream_mode_and_its_rates() {
        let c = parse(&[
            "--socket",
            "/s",
            "--mode",
            "tcp-stream",
            "--ring-size",
            "1024",
        ])
        .unwrap()
        .to_config()
        .unwrap();
        assert_eq!(c.mode, Mode::TcpStream);
        assert_eq!(c.ring_size, 1024);
        assert_eq!(c.load, Load::ClosedLoop);
        // A bit rate counts application bytes: 64-byte messages at 512 kbit/s = 1000 msg/s.
        let c = parse(&[
            "--socket",
            "/s",
            "--mode",
            "tcp-stream",
            "--rate",
            "512kbit",
        ])
        .unwrap()
        .to_config()
        .unwrap();
        assert_eq!(c.load, Load::Rate { pps: 1000.0 });
        let e = parse(&["--socket", "/s", "--mode", "udp"]).unwrap_err();
        assert!(e.contains("tcp-stream"), "{e}");
    }

    #[test]
    fn write_cost_flags_in_tcp_stream_and_refused_elsewhere() {
        let tcp = ["--socket", "/s", "--mode", "tcp-stream"];
        let c = parse(&tcp).unwrap().to_config().unwrap();
        assert_eq!(
            (c.write_cost_ns, c.write_cost_ns_per_kib),
            (DEFAULT_WRITE_COST_NS, DEFAULT_WRITE_COST_NS_PER_KIB)
        );
        let mut argv = tcp.to_vec();
        argv.extend(["--write-cost-ns", "1500", "--write-cost-ns-per-kib", "0"]);
        let c = parse(&argv).unwrap().to_config().unwrap();
        assert_eq!((c.write_cost_ns, c.write_cost_ns_per_kib), (1500, 0));
        assert_eq!(c.write_cost_per_message_ns(), 1500);
        for flag in ["--write-cost-ns", "--write-cost-ns-per-kib"] {
            let e = parse(&["--socket", "/s", "--mode", "rr", flag, "0"])
                .unwrap()
                .to_config()
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("--write-cost-ns") && e.contains("tcp-stream"),
                "{e}"
            );
            assert!(!e.contains('\n'));
        }
        // Raw stream without the flags: the config keeps the default, which raw frames ignore.
        let c = parse(&["--socket", "/s"]).unwrap().to_config().unwrap();
        assert_eq!(c.write_cost_per_message_ns(), 0);
        let e = parse(&["--socket", "/s", "--write-cost-ns", "lots"]).unwrap_err();
        assert!(e.contains("--write-cost-ns"), "{e}");
    }

    #[test]
    fn help_states_the_write_cost_defaults() {
        use clap::CommandFactory;
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains(&format!("Default {DEFAULT_WRITE_COST_NS},")),
            "{help}"
        );
        assert!(
            help.contains(&format!("default {DEFAULT_WRITE_COST_NS_PER_KIB},")),
            "{help}"
        );
    }

    #[test]
    fn bit_rate_uses_the_message_size() {
        let c = parse(&["--socket", "/s", "--size", "1486", "--rate", "12Mbit"])
            .unwrap()
            .to_config()
            .unwrap();
        // 1500-byte frames = 12000 bits -> 1000 pps.
        assert_eq!(c.load, Load::Rate { pps: 1000.0 });
    }

    #[test]
    fn durations_and_macs() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5d").is_err());
        assert_eq!(parse_mac("ff:FF:00:01:02:03"), Ok([255, 255, 0, 1, 2, 3]));
        assert!(parse_mac("ff:ff:00:01:02").is_err());
        assert!(parse_mac("fff:f:00:01:02:03").is_err());
    }

    #[test]
    fn unreachable_socket_is_a_one_line_error() {
        let dir = std::env::temp_dir().join(format!("vadapt-guest-nosock-{}", std::process::id()));
        let cfg = GuestConfig::new(dir.join("missing.sock"));
        let e = Guest::connect(cfg).unwrap_err();
        let msg = error_chain(&e);
        assert!(msg.starts_with("--socket"), "{msg}");
        assert!(!msg.contains('\n'));
    }
}
