//! The command line.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use tracing_subscriber::EnvFilter;

/// vadapt — a vhost-user network backend for KVM/QEMU VMs whose queue workers
/// poll adaptively (NetAP, EE-KBP, grow/shrink) instead of per-kick.
#[derive(Debug, Parser)]
#[command(name = "vadapt", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Log filter: error, warn, info, debug, trace, or a tracing directive
    /// (e.g. `vadapt_dataplane=debug`). Overridden by RUST_LOG.
    #[arg(long, global = true, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: VM ports (vhost-user sockets), sink/echo/TAP ports, one switch.
    Serve(Box<ServeArgs>),
    /// Print the running daemon's counters.
    Stats(StatsArgs),
    /// Print the running daemon's forwarding table: each MAC address, its
    /// port, whether it is static (a port's own, a sink's or echo's) or
    /// learned, and its age.
    Fdb(FdbArgs),
    /// Show where a frame entering a port would go, and why: its VLAN, port
    /// security, the forwarding table's answer, the IP source guard, and
    /// the ports it would leave by (the switch's own decision, against its
    /// table now; nothing is sent or learned).
    Trace(TraceArgs),
    /// Capture a running port's frames, as the switch sees them, into a
    /// pcapng file or onto stdout (`-w -`, for `tcpdump -r -`); bounded:
    /// a snap length, a frame count or a duration, and frames the writer
    /// cannot keep up with are dropped from the capture and counted, never
    /// held up.
    Capture(CaptureArgs),
    /// Change a VM port's policy in the running daemon.
    SetPolicy(SetPolicyArgs),
    /// Change one parameter of a VM port's running policy, keeping its state.
    Retune(RetuneArgs),
    /// Show the vSPACE core manager's groups, thresholds and decisions, or
    /// report a latency sample to it.
    Cores(CoresArgs),
    /// Switch the running vSPACE core manager's mode.
    SetCores(SetCoresArgs),
    /// Add a port to the running daemon; the other ports are not touched.
    /// The port is kept in the daemon's state file (restored at its next
    /// start) before the command succeeds.
    AddPort(AddPortArgs),
    /// Remove a port from the running daemon: its frontend is disconnected,
    /// its worker stopped, its socket removed, and it is taken out of the
    /// state file; the other ports are not touched.
    DelPort(DelPortArgs),
    /// Make the running daemon read its configuration again and apply the
    /// difference in ports (as SIGHUP does); unchanged ports are not touched,
    /// nor the ports added at run time (the state file's).
    Reload(ReloadArgs),
    /// Set a VM, TAP or uplink port's rate limits (ingress policing, storm
    /// control) in the running daemon; its frontend stays connected.
    SetLimits(SetLimitsArgs),
    /// The embedded default: a daemon with synthetic guests, a live view, plots in demo-out/.
    #[cfg(feature = "dev-tools")]
    Demo(vadapt_harness::demo::DemoArgs),
    /// Measure this host's costs for the simulator (a calibration file), or validate scenarios.
    #[cfg(feature = "dev-tools")]
    Calibrate(vadapt_harness::calibrate::CalibrateArgs),
    /// A synthetic guest: a vhost-user frontend driving virtio-net like a Linux guest under load.
    #[cfg(feature = "dev-tools")]
    Guest(vadapt_guest::GuestArgs),
    /// Discrete-event simulation of a virtualised host running the same policies.
    #[cfg(feature = "dev-tools")]
    Sim(vadapt_sim::SimArgs),
    /// The benchmark suite: vadapt against DPDK (and OVS-DPDK), rewrites BENCHMARKS.md.
    #[cfg(feature = "dev-tools")]
    Bench(vadapt_harness::bench::BenchArgs),
    /// Check a config file, or print the configuration the daemon would run
    /// with (every key, defaults filled in).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script (e.g. `vadapt completions bash >
    /// /etc/bash_completion.d/vadapt`).
    Completions(CompletionsArgs),
    /// Print the man page `vadapt(1)`, or write one page per command into a folder.
    Man(ManArgs),
}

/// `vadapt completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `vadapt config`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check FILE as `vadapt serve --config FILE` would, without starting
    /// anything: exit 0 and print `FILE: valid`, or exit 2 naming the first
    /// bad key.
    Check {
        /// The TOML config file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Print the effective configuration as TOML: the config file and the
    /// command line merged as `vadapt serve` merges them, every default
    /// filled in, and checked.
    #[command(after_help = "EXAMPLES:\n  \
        vadapt config show --config /etc/vadapt/vadapt.toml\n  \
        vadapt config show --vm name=vm1,socket=/run/vadapt/vm1.sock --policy eekbp")]
    Show(Box<ServeArgs>),
}

/// `vadapt man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `vadapt.1`, one `vadapt-COMMAND.1` per command and
    /// `vadapt.toml.5` (the config file's keys) into this folder instead of
    /// printing `vadapt.1`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `vadapt serve`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    vadapt serve --vm name=vm1,socket=/run/vadapt/vm1.sock,queues=2 --sink sink0 --policy netap\n  \
    vadapt serve --config /etc/vadapt/vadapt.toml\n\n\
    QEMU side: -object memory-backend-memfd,id=mem,size=1G,share=on -numa node,memdev=mem\n  \
    -chardev socket,id=c0,path=/run/vadapt/vm1.sock -netdev vhost-user,id=n0,chardev=c0,queues=2\n  \
    -device virtio-net-pci,netdev=n0,mq=on\n\n\
    Restarting vadapt without restarting the VM: add reconnect=1 to QEMU's -chardev (vadapt\n  \
    listens), or give QEMU the socket (-chardev socket,...,server=on,wait=off) and vadapt\n  \
    mode=client in --vm (vadapt connects, and reconnects with backoff).")]
pub struct ServeArgs {
    /// TOML config file; command-line ports are added to its ports and
    /// command-line options override its settings.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A VM port: `name=NAME,socket=PATH[,mode=server|client][,queues=N][,mac=MAC]
    /// [,policy=POLICY][,packed=on|off][,rss=on|off][,unsealed_memory=refuse|accept][,qmp=PATH[,qemu_pidfile=PATH]]
    /// [,qga=PATH][,guest_iface=IF][,role=lc|be][,mtu=68..65535][,port_security=on|off]
    /// [,allowed_macs=MAC:MAC...][,allowed_ips=PREFIX+PREFIX...][,max_learned=N][,ingress_policing_rate=KBPS]
    /// [,ingress_policing_burst=KB][,ingress_policing_kpkts_rate=KPPS]
    /// [,ingress_policing_kpkts_burst=KPKTS][,storm_control_pps=PPS][,storm_control_burst=N]
    /// [,vlan=1..4094]`.
    /// `packed`: offer packed
    /// virtqueues (VIRTIO_F_RING_PACKED; default on: QEMU `packed=on` and DPDK `packed_vq=1`
    /// take them, other frontends keep split rings). `rss`: offer VIRTIO_NET_F_RSS (default
    /// on): a frontend that gives vadapt its control queue sets the guest's Toeplitz key and
    /// indirection table there (QEMU 7.2 and DPDK keep the queue: default steering).
    /// Rate limits, each 0 or absent for none: `ingress_policing_rate=KBPS`,
    /// `ingress_policing_burst=KB` (default 8000), `ingress_policing_kpkts_rate=KPPS`,
    /// `ingress_policing_kpkts_burst=KPKTS` (default 16), as OVS's columns of these names;
    /// `storm_control_pps=PPS`, `storm_control_burst=PACKETS` (default: PPS) for the
    /// broadcast, multicast and unknown unicast the guest sends (see `vadapt set-limits`).
    /// `mode=client`: QEMU
    /// listens on PATH and vadapt connects (default `server`: vadapt listens). `qmp`: the
    /// VM's QMP socket, for the core manager; only threads of the process serving it are
    /// moved, and that process must name the socket on its command line, or be the one
    /// `qemu_pidfile` names (needed under libvirt, which passes QEMU its monitor as a
    /// descriptor). `mtu`: offered as VIRTIO_NET_F_MTU; frames of up to MTU + 18 bytes
    /// pass, longer ones are dropped (`over_mtu`); default 1500, not offered.
    /// `port_security` (default on): the port owns its `mac` and `allowed_macs` (static in
    /// the switch, no other port takes them) and the guest may send from them alone; other
    /// frames are dropped (`spoofed_src`). A port with neither has no security; `off` lets
    /// the guest send from any address. `allowed_macs`: separated by `:`, each written
    /// `02-00-00-00-00-b1` or `02:00:00:00:00:b1`. `allowed_ips`: IPv4/IPv6 prefixes separated
    /// by `+` (`10.0.0.5/32+fd00::5`; a bare address is its /32 or /128), at most 64; needs
    /// port security. The guest's ARP sender, IPv4 and IPv6 source and Neighbor Advertisement
    /// target must be inside them (DHCP from 0.0.0.0, ARP probes, the MAC's IPv6 link-local
    /// and `::` for duplicate address detection excepted; router advertisements are dropped);
    /// other frames are dropped (`spoofed_ip`). `max_learned`: most addresses learned
    /// from the port's guest (default: the config file's `max_learned_per_port`, 1024; the
    /// table holds `mac_table_size`, 8192, in all). `vlan`: the port is an access port of that
    /// VLAN (default: VLAN 0, the untagged domain); either way a tagged frame from the guest
    /// is dropped (`vlan_tagged`). See docs/tenancy.md. Repeatable.
    #[arg(long = "vm", value_name = "SPEC")]
    pub vms: Vec<String>,
    /// A sink port (counts and drops): `NAME[,mac=MAC][,vlan=1..4094]`. Repeatable.
    #[arg(long = "sink", value_name = "SPEC")]
    pub sinks: Vec<String>,
    /// An echo port (swaps MACs, sends back): `NAME[,mac=MAC][,vlan=1..4094]`. Repeatable.
    #[arg(long = "echo", value_name = "SPEC")]
    pub echoes: Vec<String>,
    /// A TAP port to the host's network stack, named after the interface:
    /// `NAME[,mtu=68..65535][,vlan=V | ,trunks=V:W-X][,native_vlan=V]` (`mtu` is set on the
    /// interface; default: left as it is, and frames over 1518 bytes dropped). VLANs as OVS's
    /// `tag`/`trunks`: `vlan=V` makes an access port of VLAN V; otherwise the TAP is a trunk
    /// of `trunks` (default: every VLAN) tagged with 802.1Q, and of `native_vlan` (default:
    /// VLAN 0, the untagged domain) untagged. Rate limits on what the host sends into the
    /// switch: the `--vm` keys `ingress_policing_*` and `storm_control_*`. Repeatable.
    #[arg(long = "tap", value_name = "SPEC")]
    pub taps: Vec<String>,
    /// An uplink to the physical network over AF_XDP (no NIC unbinding, no hugepages):
    /// `name=NAME,iface=IFACE[,queues=N][,mode=auto|copy|zerocopy][,policy=POLICY][,mtu=N][,cpus=A:B]
    /// [,trunks=V:W-X][,native_vlan=V]`: a trunk of `trunks` (default: every VLAN) tagged
    /// with 802.1Q, and of `native_vlan` (default: VLAN 0, the untagged domain) untagged.
    /// Rate limits on what the wire sends into the switch, all queues together: the `--vm`
    /// keys `ingress_policing_*` and `storm_control_*`.
    /// One AF_XDP socket and queue worker per NIC queue `0..N`, running POLICY (default:
    /// `--policy`), queue q pinned to the q-th of `cpus` (round-robin; default: not pinned). libxdp attaches its redirect program to IFACE and detaches it at stop;
    /// one a killed vadapt left is replaced at the next start. Repeatable.
    #[arg(long = "uplink", value_name = "SPEC")]
    pub uplinks: Vec<String>,
    /// Default policy of VM ports: interrupt, busy-poll, netap, netap-ml, growshrink,
    /// eekbp, or `fixed-interval[:US]` (the NetAP paper's probe, for sweeps; no ring guard)
    /// [default: netap, or the config file's].
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<String>,
    /// Model file of `netap-ml` policies (the lab's forest JSON) [default: the
    /// built-in model, or the config file's `netap_ml_model`].
    #[arg(long, value_name = "PATH")]
    pub netap_ml_model: Option<PathBuf>,
    /// Control socket for `vadapt stats` / `vadapt set-policy`
    /// [default: /run/vadapt/control.sock].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9900). Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Let this group use the vhost-user sockets (mode 0660 instead of 0600).
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Pin queue workers to these CPUs, round-robin (e.g. `1` or `2,3`).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// vSPACE: the CPUs the core manager splits between VM vCPUs and queue
    /// workers (e.g. `0,1`); `[cores] cpus` in the config file.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cores_cpus: Vec<usize>,
    /// vSPACE mode: off, p (performance), e (energy), r (resource efficiency);
    /// `[cores] mode` in the config file.
    #[arg(long, value_name = "MODE")]
    pub cores_mode: Option<String>,
    /// vSPACE: `per-port` (a worker per VM port, default) or `per-nq-core`
    /// (one worker per NQ core, ports' queues moved between them as the
    /// group changes); `[cores] queue_workers` in the config file.
    #[arg(long, value_name = "HOW")]
    pub queue_workers: Option<String>,
    /// Folder of the state file `ports.toml`, where the ports added and
    /// removed at run time (`vadapt add-port`/`del-port`, the libvirt hook)
    /// are kept: written atomically before the request is answered, and
    /// restored at start after the config file's ports (on a name clash the
    /// config file's port is used, and the clash logged). `vadapt reload`
    /// leaves run-time ports and the file alone. A file that cannot be used
    /// is moved aside to `ports.toml.corrupt-<unix seconds>`, logged, and
    /// the daemon starts with the config file's ports (see --strict)
    /// [default: the config file's `state_dir`, else $STATE_DIRECTORY
    /// (systemd's StateDirectory=), else /var/lib/vadapt].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Refuse to start when the state file cannot be used (unreadable,
    /// corrupt, a newer format) or a port in it cannot be restored, leaving
    /// the file as it is; `state_strict = true` in the config file.
    #[arg(long)]
    pub strict: bool,
}

/// `vadapt cores`.
#[derive(Debug, Args)]
pub struct CoresArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The daemon's control socket.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/run/vadapt/control.sock",
        global = true
    )]
    pub control: PathBuf,
    /// Report instead of show.
    #[command(subcommand)]
    pub report: Option<CoresCommand>,
}

/// `vadapt cores report`.
#[derive(Debug, Subcommand)]
pub enum CoresCommand {
    /// Report the latency-critical workload's P95 latency of the last
    /// period, for the threshold explorer (vSPACE Algorithm 3).
    Report {
        /// P95 latency, µs.
        #[arg(long, value_name = "US")]
        p95_us: u64,
    },
}

/// `vadapt set-cores`.
#[derive(Debug, Args)]
pub struct SetCoresArgs {
    /// off, p, e or r.
    #[arg(long)]
    pub mode: String,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// `vadapt stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print the Prometheus text exposition instead of a table.
    #[arg(long, conflicts_with = "json")]
    pub prometheus: bool,
}

/// `vadapt trace`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    vadapt trace vm1 src=52:54:00:00:00:01,dst=ff:ff:ff:ff:ff:ff\n  \
    vadapt trace vm1 src=52:54:00:00:00:01,dst=52:54:00:00:00:02,ip_src=10.0.0.9\n  \
    vadapt trace up0 src=02:00:00:00:00:07,dst=52:54:00:00:00:01,vlan=7,ip_src=10.0.7.1,arp")]
pub struct TraceArgs {
    /// The port the frame enters (any kind).
    #[arg(value_name = "PORT")]
    pub port: String,
    /// The frame: `src=MAC,dst=MAC[,vlan=0..4094][,ip_src=IP][,ip_dst=IP][,arp]`. `vlan`: an
    /// 802.1Q tag; `ip_src`: a UDP packet from that IPv4 or IPv6 address (with `arp`: an ARP
    /// request whose sender it is); without it the frame carries no IP.
    #[arg(value_name = "FRAME-SPEC")]
    pub frame: String,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `vadapt capture`.
#[derive(Debug, Args)]
#[command(
    after_help = "Directions are the port's, as tcpdump on a VM's host tap \
    interface or OVS's vhost-user port counters name them: rx is what the port received from \
    its VM (the guest's transmit), tx what the switch handed it for its VM (the guest's \
    receive); `vadapt stats`' tx_pkts/rx_pkts are the guest's, the other way round. Frames are \
    taken at the switch: rx frames as they enter it (those it then drops, by port security or \
    a VLAN rule, included; those the port dropped before, over its MTU or rate limit, not), \
    tx frames as the port's egress is handed them (a port's backlog or ring may still drop \
    them). The file is pcapng: one interface named after the port, each frame's direction in \
    epb_flags (inbound rx, outbound tx) and an rx frame's queue in its comment (`queue N`), and at the end \
    the frames the capture saw and dropped (isb_ifrecv, isb_ifdrop; the port's \
    capture_dropped in `vadapt stats`). One capture per port at a time. Ctrl-C ends it with a \
    complete file.\n\nEXAMPLES:\n  \
    vadapt capture vm1 -w vm1.pcapng\n  \
    vadapt capture vm1 --dir rx --queue 1 -c 100 -w -  | tcpdump -n -r -\n  \
    vadapt capture up0 --dir tx --snaplen 128 --duration 10 -w up0.pcapng"
)]
pub struct CaptureArgs {
    /// The port to capture (any kind: VM, sink, echo, TAP, uplink).
    #[arg(value_name = "PORT")]
    pub port: String,
    /// Where to write the pcapng stream: a file (replaced), or `-` for stdout.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub write: PathBuf,
    /// Which frames, from the port's point of view: `rx` those it received
    /// from its VM, `tx` those the switch handed it for its VM, or both.
    #[arg(long, value_enum, default_value_t = CaptureDirArg::Both)]
    pub dir: CaptureDirArg,
    /// Only the frames received on queue pair N (needs `--dir rx`: the
    /// queue a tx frame leaves by is chosen inside the port, after the
    /// switch, where the capture is taken).
    #[arg(long, value_name = "N")]
    pub queue: Option<u16>,
    /// Bytes kept of each frame, 1 to 262144 (every frame fits the default).
    #[arg(short = 's', long, value_name = "BYTES", default_value_t = 262_144)]
    pub snaplen: u32,
    /// Stop after N frames.
    #[arg(short = 'c', long, value_name = "N")]
    pub count: Option<u64>,
    /// Stop after this many seconds (fractions allowed).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// `vadapt capture --dir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CaptureDirArg {
    /// Frames the port received from its VM (entering the switch).
    Rx,
    /// Frames the switch handed the port for its VM.
    Tx,
    /// Both.
    Both,
}

/// `vadapt fdb`.
#[derive(Debug, Args)]
#[command(
    after_help = "A static address is a VM port's own (its mac= and allowed_macs=, with \
    port security) or a sink's or echo's: it never ages, and no other port takes it; its age is \
    the time since it was pinned or moved (a migrating VM's address moves to the destination \
    port when its guest first sends). A learned address ages out after mac_ageing_s without a \
    frame from it. At most mac_table_size addresses are learned; the counters \
    (`vadapt stats`, vadapt_port_fdb_not_learned_total) count those that were not."
)]
pub struct FdbArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `vadapt add-port`: one port, as `serve` takes it.
#[derive(Debug, Args)]
#[command(
    group(clap::ArgGroup::new("port").required(true).args(["vm", "sink", "echo", "tap", "uplink"])),
    after_help = "EXAMPLES:\n  \
    vadapt add-port --vm name=vm3,socket=/run/vadapt/vm3.sock,queues=2,policy=netap\n  \
    vadapt add-port --sink sink1\n  \
    vadapt add-port --uplink name=up0,iface=eth1,queues=2,policy=eekbp\n\n\
    The port is checked as `serve` checks its ports (a name or socket already taken, or a\n  \
    sink's or echo's MAC, is refused, naming the port). A VM port may have another VM port's\n  \
    MAC: the destination port of a live migration has the VM's. It is not written to the config file: a `reload` of a file\n  \
    without it removes it again."
)]
pub struct AddPortArgs {
    /// A VM port, as `serve --vm` takes it.
    #[arg(long, value_name = "SPEC")]
    pub vm: Option<String>,
    /// A sink port, as `serve --sink` takes it.
    #[arg(long, value_name = "SPEC")]
    pub sink: Option<String>,
    /// An echo port, as `serve --echo` takes it.
    #[arg(long, value_name = "SPEC")]
    pub echo: Option<String>,
    /// A TAP port, as `serve --tap` takes it.
    #[arg(long, value_name = "SPEC")]
    pub tap: Option<String>,
    /// An uplink, as `serve --uplink` takes it.
    #[arg(long, value_name = "SPEC")]
    pub uplink: Option<String>,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// `vadapt del-port`.
#[derive(Debug, Args)]
pub struct DelPortArgs {
    /// The port's name (any kind).
    pub name: String,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// `vadapt reload`.
#[derive(Debug, Args)]
#[command(
    after_help = "The daemon reads its --config file again, with the command line it was \
    started with, and applies the difference in ports: ports no longer there are removed, new \
    ones added, changed ones removed and added again (a VM, TAP or uplink port whose rate \
    limits alone changed gets them in place, still connected). Other settings (policy, cpus, [cores], \
    ...) take a restart; the answer names those that changed. An invalid file changes nothing.\n\n\
    `kill -HUP $(pidof vadapt)` does the same."
)]
pub struct ReloadArgs {
    /// The daemon's control socket [default: the `control` of --config's
    /// file, or /run/vadapt/control.sock].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Take the control socket from this config file (its `control` key, or
    /// the default): the daemon's own `--config`, as the systemd unit's
    /// `ExecReload` passes it.
    #[arg(long, value_name = "FILE", conflicts_with = "control")]
    pub config: Option<PathBuf>,
}

/// `vadapt set-limits`.
#[derive(Debug, Args)]
#[command(
    after_help = "Every limit is set at once: one not given is removed, 0 is no limit. Units \
    as the `--vm` keys of the same meaning (OVS's Interface columns, in parentheses). A frame \
    from the guest passes only if both ingress rates have the tokens for it: its bits without \
    the 14-byte Ethernet header, and one frame (a TSO frame counts whole, once). Storm control \
    counts the frames the switch would flood: broadcast, multicast and unknown unicast. \
    Dropped frames are counted by reason, `policed` and `storm` (`vadapt stats`). The port's \
    worker applies the limits after its current pass; the guest stays connected. See \
    docs/tenancy.md, \"Rate limits and storm control\".\n\n\
    EXAMPLES:\n  \
    vadapt set-limits vm1 --rate-kbps 100000 --burst-kb 10000 --storm-pps 200\n  \
    vadapt set-limits vm1          # no limits"
)]
pub struct SetLimitsArgs {
    /// The port's name (a VM, TAP or uplink port).
    pub port: String,
    /// Bits a second from the guest, kbps (`ingress_policing_rate`).
    #[arg(
        long,
        value_name = "KBPS",
        default_value_t = 0,
        visible_alias = "ingress-policing-rate"
    )]
    pub rate_kbps: u32,
    /// Burst of the bit rate, kb (`ingress_policing_burst`); 0: 8000. At least one frame.
    #[arg(
        long,
        value_name = "KB",
        default_value_t = 0,
        visible_alias = "ingress-policing-burst"
    )]
    pub burst_kb: u32,
    /// Frames a second from the guest, kpps (`ingress_policing_kpkts_rate`).
    #[arg(
        long,
        value_name = "KPPS",
        default_value_t = 0,
        visible_alias = "ingress-policing-kpkts-rate"
    )]
    pub kpps: u32,
    /// Burst of the frame rate, kpkts (`ingress_policing_kpkts_burst`); 0: 16.
    #[arg(
        long,
        value_name = "KPKTS",
        default_value_t = 0,
        visible_alias = "ingress-policing-kpkts-burst"
    )]
    pub kpkts_burst: u32,
    /// Flooded frames a second from the guest, packets/s (`storm_control_pps`).
    #[arg(
        long,
        value_name = "PPS",
        default_value_t = 0,
        visible_alias = "storm-control-pps"
    )]
    pub storm_pps: u32,
    /// Burst of the flood rate, packets (`storm_control_burst`); 0: as many as --storm-pps.
    #[arg(
        long,
        value_name = "PACKETS",
        default_value_t = 0,
        visible_alias = "storm-control-burst"
    )]
    pub storm_burst: u32,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// `vadapt set-policy`.
#[derive(Debug, Args)]
#[command(
    after_help = "A port added at run time (vadapt add-port, the libvirt hook) keeps the new \
    policy across restarts: it is written to the state file before the answer. A port of the \
    config file goes back to the file's policy at the next restart, or at a reload that changes \
    the port."
)]
pub struct SetPolicyArgs {
    /// VM port or uplink name (an uplink switches every NIC queue).
    #[arg(long)]
    pub port: String,
    /// New policy: interrupt, busy-poll, netap, netap-ml, growshrink, eekbp (default parameters),
    /// or fixed-interval:US (one interval, no search: the NetAP paper's probe, for sweeps).
    pub policy: String,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// `vadapt retune`.
#[derive(Debug, Args)]
#[command(after_help = "PARAMETERS:\n  \
    search-range=LO-HI    NetAP: golden-section search range, µs, from the next search on (NetAP-ML)\n  \
    kick-threshold=P      NetAP: ring-full safety net, permille of the ring (0 = the paper's: off)\n  \
    poll-max=NS           grow/shrink: longest poll window, ns (QEMU's poll-max-ns)\n  \
    quota=N               EE-KBP: packets per queue per busy-poll pass\n  \
    interval=US           fixed-interval: the sleep between drains, µs, from the next sleep\n  \
    workload=V/T/S        NetAP-ML: VMs, threads per VM, message size (B) it predicts for, from the next search on\n\n\
    EXAMPLE:\n  vadapt retune --port vm1 search-range=1600-2600")]
pub struct RetuneArgs {
    /// VM port or uplink name.
    #[arg(long)]
    pub port: String,
    /// The change, PARAM=VALUE (see below).
    pub retune: String,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/vadapt/control.sock")]
    pub control: PathBuf,
}

/// Set up `tracing` to stderr with `level` unless RUST_LOG says otherwise,
/// and report panics through it (see [`log_panics`]).
pub fn init_logging(level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    log_panics();
}

/// A panic on any thread becomes one `ERROR` log line naming the thread
/// (`vadapt-cores`, a queue worker, ...), the message and where, so that it
/// reaches wherever the logs go with their timestamps; the backtrace follows
/// when `RUST_BACKTRACE` asks for one. The daemon keeps running where the
/// panicking part can be stopped alone (a queue worker, the core manager).
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        let message = vadapt_dataplane::panic_message::panic_message(info.payload());
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            tracing::error!(thread, at, "panicked: {message}\n{backtrace}");
        } else {
            tracing::error!(thread, at, "panicked: {message}");
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_panic_is_one_error_line_naming_the_thread_the_message_and_where() {
        log_panics();
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let thread = std::thread::Builder::new()
            .name("vadapt-test-panics".into())
            .spawn(move || tracing::subscriber::with_default(subscriber, || panic!("on purpose")))
            .unwrap();
        assert!(thread.join().is_err());
        let _ = std::panic::take_hook();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("ERROR")
                && text.contains("panicked: on purpose")
                && text.contains("thread=\"vadapt-test-panics\"")
                && text.contains("cli.rs:"),
            "{text}"
        );
    }
}
