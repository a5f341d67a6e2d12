//! `vadapt.toml(5)`: the config file's manual page, generated from the
//! config types so that it cannot drift from what the parser takes.
//!
//! [`KEYS`] is the one list of keys with their meaning. Its tests hold it
//! to the parser both ways: each table's keys are exactly the fields its
//! type deserializes (read from the serde derive itself), and
//! every key parses when written in its table. The defaults on the page
//! are not written here at all: they are the values a config with only the
//! required keys serializes to ([`defaults`]), and the policies' parameters
//! are those of each policy's defaults.

use std::collections::BTreeMap;
use vadapt_dataplane::config::DaemonConfig;
use vadapt_policy::{PolicyConfig, PolicyKind};

/// One key of the config file.
#[derive(Debug)]
pub struct Key {
    /// Its table: `""` for the top level, `vm`, `vm.limits`, `cores`, ...
    pub table: &'static str,
    /// The key.
    pub key: &'static str,
    /// A value it takes, written as in the file (the tests parse it).
    pub example: &'static str,
    /// What it means, one sentence or two, units included.
    pub doc: &'static str,
}

const fn k(
    table: &'static str,
    key: &'static str,
    example: &'static str,
    doc: &'static str,
) -> Key {
    Key {
        table,
        key,
        example,
        doc,
    }
}

/// The tables of port keys that repeat (`[[vm]]`, ...), with the keys a
/// port of that kind must have.
const PORT_TABLES: &[(&str, &str)] = &[
    ("vm", "name = \"vm1\"\nsocket = \"/run/vadapt/vm1.sock\""),
    ("sink", "name = \"sink0\""),
    ("echo", "name = \"echo0\""),
    ("tap", "name = \"tap0\""),
    ("uplink", "name = \"up0\"\niface = \"eth1\""),
];

/// Rate limit keys, shared by `[vm.limits]`, `[tap.limits]` and `[uplink.limits]`.
const LIMIT_KEYS: &[(&str, &str, &str)] = &[
    ("ingress_policing_rate", "100000", "Bits a second the port may send into the switch, kbps (1000 bit/s), each frame counted without its 14-byte Ethernet header as OVS does; 0: no limit."),
    ("ingress_policing_burst", "8000", "Burst of the bit rate, kb (1000 bits); 0: OVS's default, 8000 kb."),
    ("ingress_policing_kpkts_rate", "100", "Frames a second the port may send, kpps (1000 frames/s); 0: no limit."),
    ("ingress_policing_kpkts_burst", "16", "Burst of the frame rate, kpkts (1000 frames); 0: OVS's default, 16."),
    ("storm_control_pps", "200", "Frames a second the port may have flooded (broadcast, multicast, unknown unicast), packets/s; 0: no limit."),
    ("storm_control_burst", "200", "Burst of the flood rate, packets; 0: storm_control_pps (a second's worth)."),
];

/// Every key but the rate limits ([`LIMIT_KEYS`]) and the policies'
/// parameters (generated from each policy's defaults).
pub const KEYS: &[Key] = &[
    k("", "control", "\"/run/vadapt/control.sock\"", "The control socket (vadapt stats, add-port, reload, ...)."),
    k("", "metrics", "\"127.0.0.1:9900\"", "Serve Prometheus metrics over HTTP on this address; absent: off."),
    k("", "socket_group", "\"libvirt-qemu\"", "The group given read and write access to the vhost-user sockets (0660 instead of 0600), so that QEMU running as that group may connect; it must exist when the daemon starts."),
    k("", "cpus", "[1, 2]", "CPUs the queue workers are pinned to, round-robin; empty: not pinned."),
    k("", "mac_ageing_s", "300", "A learned MAC address is forgotten after this many seconds without a frame from it."),
    k("", "mac_table_size", "8192", "Most addresses the switch learns (a port's own and a sink's or echo's are not counted): past it a new source is not learned and frames to it are flooded; OVS's mac-table-size."),
    k("", "max_learned_per_port", "1024", "Most addresses learned from one VM port at once; a port's max_learned overrides it."),
    k("", "backlog", "1024", "Frames queued for one destination queue before it drops, per queue pair."),
    k("", "state_dir", "\"/var/lib/vadapt\"", "Where ports added or removed at run time are kept (ports.toml, written before add-port and del-port are answered) and restored at start after the config file's ports, which win a name clash; absent: $STATE_DIRECTORY, else /var/lib/vadapt."),
    k("", "state_strict", "false", "Refuse to start when the state file cannot be read or one of its ports cannot be made; false: set the file aside as ports.toml.corrupt-SECS, say why, and start with the config file's ports."),
    k("", "netap_ml_model", "\"/etc/vadapt/model.json\"", "The netap-ml policies' model (the lab's forest JSON); absent: the built-in model."),
    k("", "policy", "{ kind = \"netap\" }", "The default policy of VM ports and uplinks: a table with kind and its parameters (POLICIES below)."),
    k("", "cores", "{ mode = \"off\" }", "vSPACE core management, the [cores] table below; off by default."),
    k("", "vm", "[]", "VM ports, one [[vm]] table each."),
    k("", "sink", "[]", "Sink ports (count and drop), one [[sink]] table each."),
    k("", "echo", "[]", "Echo ports (swap MACs, send back), one [[echo]] table each."),
    k("", "tap", "[]", "TAP ports to the host's stack, one [[tap]] table each."),
    k("", "uplink", "[]", "Uplinks to the physical network over AF_XDP, one [[uplink]] table each."),
    k("vm", "name", "\"vm1\"", "Port name, 1-32 characters of [A-Za-z0-9_.-], unique in the daemon. Required."),
    k("vm", "socket", "\"/run/vadapt/vm1.sock\"", "Absolute path of the vhost-user socket. Required."),
    k("vm", "mode", "\"client\"", "server: vadapt listens (QEMU's chardev with reconnect=1 survives a vadapt restart); client: QEMU listens and vadapt connects, reconnecting with backoff."),
    k("vm", "queues", "2", "Queue pairs offered (VIRTIO_NET_F_MQ), 1-16."),
    k("vm", "mac", "\"52:54:00:00:00:01\"", "The VM's MAC, offered in the config space; with port security the port owns it. Absent: derived from the name, and no port security."),
    k("vm", "policy", "{ kind = \"eekbp\" }", "This port's policy; absent: the daemon's policy."),
    k("vm", "limits", "{ storm_control_pps = 200 }", "Rate limits on what the guest sends, the [vm.limits] table below."),
    k("vm", "packed", "false", "Offer packed virtqueues (VIRTIO_F_RING_PACKED)."),
    k("vm", "rss", "false", "Offer VIRTIO_NET_F_RSS: the guest's driver steers received frames with its own key and indirection table."),
    k("vm", "unsealed_memory", "\"accept\"", "Guest memory files not sealed against shrinking: refuse, or accept (DPDK virtio-user, QEMU memory-backend-file, hugetlbfs), mapped under a SIGBUS guard."),
    k("vm", "qmp", "\"/run/vm1.qmp\"", "The VM's QMP socket, where the core manager finds its vCPU threads."),
    k("vm", "qemu_pidfile", "\"/run/vm1.pid\"", "The VM's QEMU pidfile; the process serving qmp must be the one it names (needed under libvirt)."),
    k("vm", "qga", "\"/run/vm1.qga\"", "The VM's guest agent socket, through which the core manager sets the guest's queue count."),
    k("vm", "guest_iface", "\"eth1\"", "The guest's interface behind this port, for ethtool -L through the guest agent; absent: eth0."),
    k("vm", "role", "\"be\"", "lc (latency-critical) or be (best-effort: vSPACE-R lends it idle cores and pauses it when there are none)."),
    k("vm", "mtu", "9000", "The MTU offered to the guest (VIRTIO_NET_F_MTU), 68-65535 bytes; frames over MTU + 18 bytes are dropped. Absent: 1500, not offered."),
    k("vm", "port_security", "false", "The port owns its mac and allowed_macs and its guest may send from them alone (spoofed_src drops); false: from any address."),
    k("vm", "allowed_macs", "[\"52:54:00:00:00:11\"]", "More addresses the guest may send from besides mac, at most 16."),
    k("vm", "allowed_ips", "[\"10.0.0.5\", \"fd00::5/128\"]", "IP source guard: IPv4 and IPv6 prefixes the guest's ARP, IP and ND senders must be in (spoofed_ip drops), at most 64; needs port security."),
    k("vm", "max_learned", "64", "Most addresses learned from this port's guest at once; absent: max_learned_per_port."),
    k("vm", "vlan", "10", "Access port of this VLAN, 1-4094, untagged both ways; absent: the untagged domain. A tagged frame from the guest is dropped either way."),
    k("sink", "name", "\"sink0\"", "Port name. Required."),
    k("sink", "mac", "\"02:00:00:00:00:01\"", "A static address in the switch for the port; absent: none."),
    k("sink", "vlan", "10", "Access port of this VLAN, 1-4094."),
    k("echo", "name", "\"echo0\"", "Port name. Required."),
    k("echo", "mac", "\"02:00:00:00:00:02\"", "A static address in the switch for the port; absent: none."),
    k("echo", "vlan", "10", "Access port of this VLAN, 1-4094."),
    k("tap", "name", "\"tap0\"", "Port name, and the TAP interface's (at most 15 bytes). Required."),
    k("tap", "mtu", "9000", "The interface's MTU, set as the port opens; absent: left as it is, and frames over 1518 bytes dropped."),
    k("tap", "vlan", "10", "Access port of this VLAN; not with trunks or native_vlan."),
    k("tap", "trunks", "[10, 20]", "VLANs carried tagged (802.1Q) to the host's stack; empty: every VLAN."),
    k("tap", "native_vlan", "10", "The VLAN carried untagged; absent: VLAN 0, the untagged domain."),
    k("tap", "limits", "{ storm_control_pps = 200 }", "Rate limits on what the host sends into the switch, the [tap.limits] table (keys as [vm.limits])."),
    k("uplink", "name", "\"up0\"", "Port name. Required."),
    k("uplink", "iface", "\"eth1\"", "The network interface (a NIC, or one end of a veth pair). Required."),
    k("uplink", "queues", "2", "NIC queues served, from queue 0, one AF_XDP socket (16 MiB of UMEM) and queue worker each."),
    k("uplink", "mode", "\"copy\"", "auto, copy or zerocopy: AF_XDP zero-copy where the driver has it (auto), or as asked."),
    k("uplink", "policy", "{ kind = \"eekbp\" }", "The queue workers' policy; absent: the daemon's policy."),
    k("uplink", "mtu", "9000", "Largest frame taken either way is mtu + 18 bytes (absent: 1518); the interface's own MTU is left as it is."),
    k("uplink", "cpus", "[2, 3]", "CPUs the queue workers are pinned to, queue q to cpus[q % len]; empty: not pinned."),
    k("uplink", "trunks", "[10, 20]", "VLANs carried tagged (802.1Q) on the wire; empty: every VLAN."),
    k("uplink", "native_vlan", "10", "The VLAN carried untagged; absent: VLAN 0, the untagged domain."),
    k("uplink", "limits", "{ storm_control_pps = 200 }", "Rate limits on what the wire sends into the switch, all queues together, the [uplink.limits] table (keys as [vm.limits])."),
    k("cores", "mode", "\"e\"", "vSPACE mode: off, p (performance), e (energy) or r (resource efficiency)."),
    k("cores", "cpus", "[0, 1]", "The CPUs the core manager splits between the VMs' vCPUs and the queue workers."),
    k("cores", "period_ms", "100", "One measurement and allocation period, ms (paper: 100)."),
    k("cores", "margin", "1.1", "MARGIN of vSPACE's Algorithm 2: the headroom kept over measured demand when sizing a group (paper: 1.1)."),
    k("cores", "apply", "\"advise\"", "How an allocation is carried out: affinity (sched_setaffinity), cpuset (cgroup cpusets under cgroup) or advise (report only)."),
    k("cores", "cgroup", "\"/sys/fs/cgroup/vadapt\"", "Parent cgroup of the cpusets, for apply = \"cpuset\"."),
    k("cores", "thresholds", "{ slo_p95_us = 1000 }", "Initial thresholds and the explorer's constants, the [cores.thresholds] table below."),
    k("cores", "queue_workers", "\"per-nq-core\"", "per-port (a worker per VM port) or per-nq-core (one worker per NQ core, ports' queues moved between them)."),
    k("cores.thresholds", "initial_vcpu", "0.7", "Th_vCPU before any exploration, fraction of a core; fixed if explore is false."),
    k("cores.thresholds", "initial_nq", "0.7", "Th_NQ before any exploration, fraction of a core."),
    k("cores.thresholds", "min", "0.1", "Lowest threshold exploration may reach, fraction of a core."),
    k("cores.thresholds", "max", "0.95", "Highest threshold exploration may reach, fraction of a core, below 1."),
    k("cores.thresholds", "explore", "false", "Explore the thresholds (vSPACE Algorithm 3); false keeps the initial ones."),
    k("cores.thresholds", "slo_p95_us", "1000", "The SLO: a period whose P95 latency (vadapt cores report) is above this violates it, µs."),
    k("cores.thresholds", "allow_vio", "0.05", "Fraction of a round's samples that may violate the SLO before the thresholds are lowered, 0-1."),
    k("cores.thresholds", "reward", "1.03", "Factor on both thresholds after a round without violations, at least 1."),
    k("cores.thresholds", "weight", "0.7", "How far a correcting round moves the thresholds, 0-1."),
    k("cores.thresholds", "samples_per_round", "1000", "Samples collected before each round."),
    k("cores.thresholds", "stable_tolerance", "0.01", "A round is stable when neither threshold moved by more than this fraction of its value."),
    k("cores.thresholds", "stable_rounds", "3", "Halt exploration after this many stable rounds in a row; 0: never."),
];

/// The limit tables, each with [`LIMIT_KEYS`].
const LIMIT_TABLES: &[&str] = &["vm.limits", "tap.limits", "uplink.limits"];

/// Every key, limits included, as `(table, key, example, doc)`.
pub fn all_keys() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    let mut out: Vec<_> = KEYS
        .iter()
        .map(|k| (k.table, k.key, k.example, k.doc))
        .collect();
    for t in LIMIT_TABLES {
        out.extend(LIMIT_KEYS.iter().map(|&(key, ex, doc)| (*t, key, ex, doc)));
    }
    out
}

/// The defaults, as `table -> key -> value` written as in the file: a
/// config with one port of each kind, only its required keys, serialized.
/// A key that is absent has no default (none, or required).
pub fn defaults() -> BTreeMap<String, BTreeMap<String, String>> {
    let mut text = String::new();
    for (table, required) in PORT_TABLES {
        text.push_str(&format!("[[{table}]]\n{required}\n"));
    }
    let cfg: DaemonConfig = toml::from_str(&text).expect("the required keys parse");
    let value = toml::Value::try_from(&cfg).expect("a config serializes");
    let mut out = BTreeMap::new();
    collect(&value, "", &mut out);
    // The limits' defaults, which a port without limits does not write.
    let limits = toml::Value::try_from(vadapt_dataplane::config::PortLimits::default())
        .expect("limits serialize");
    for t in LIMIT_TABLES {
        collect(&limits, t, &mut out);
    }
    out
}

fn collect(v: &toml::Value, table: &str, out: &mut BTreeMap<String, BTreeMap<String, String>>) {
    let Some(map) = v.as_table() else { return };
    for (key, val) in map {
        let sub = if table.is_empty() {
            key.clone()
        } else {
            format!("{table}.{key}")
        };
        match val {
            toml::Value::Table(_) => collect(val, &sub, out),
            toml::Value::Array(a) if a.first().is_some_and(toml::Value::is_table) => {
                collect(&a[0], &sub, out);
            }
            _ => {}
        }
        let shown = match val {
            toml::Value::Table(_) => continue,
            toml::Value::Array(a) if a.first().is_some_and(toml::Value::is_table) => continue,
            other => other.to_string(),
        };
        out.entry(table.to_string())
            .or_default()
            .insert(key.clone(), shown);
    }
}

/// Each policy's parameters and their defaults, as `(kind, [(key, default)])`.
pub fn policy_parameters() -> Vec<(&'static str, Vec<(String, String)>)> {
    PolicyKind::ALL
        .iter()
        .map(|&kind| {
            let value = toml::Value::try_from(PolicyConfig::default_for(kind))
                .expect("a policy serializes");
            let params = value
                .as_table()
                .into_iter()
                .flatten()
                .filter(|(key, _)| key.as_str() != "kind")
                .map(|(key, v)| (key.clone(), v.to_string()))
                .collect();
            (kind.as_str(), params)
        })
        .collect()
}

/// Escape text for roff: backslashes, and a leading `.` or `'`.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The page, in roff.
pub fn render(version: &str) -> String {
    let defaults = defaults();
    let mut out = String::new();
    out.push_str(&format!(
        ".TH vadapt.toml 5 \"\" \"vadapt {version}\" \"File Formats\"\n\
         .SH NAME\nvadapt.toml \\- the configuration file of vadapt serve\n\
         .SH SYNOPSIS\n/etc/vadapt/vadapt.toml, read by \\fBvadapt serve \\-\\-config\\fR FILE\n\
         .SH DESCRIPTION\nA TOML file. Options given on the command line override its settings, \
         and its ports are added to the command line's. Unknown keys are errors, naming the key and \
         its line. \\fBvadapt config check\\fR FILE checks a file; \\fBvadapt config show \\-\\-config\\fR \
         FILE prints the configuration the daemon would run with, every default filled in. \
         \\fBsystemctl reload vadapt\\fR (\\fBvadapt reload\\fR) applies a change of ports; other keys \
         take a restart.\n"
    ));
    let mut tables: Vec<&str> = Vec::new();
    for (table, ..) in all_keys() {
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    for table in tables {
        let heading = match table {
            "" => "TOP LEVEL".to_string(),
            t if PORT_TABLES.iter().any(|(p, _)| *p == t) => format!("[[{t}]]"),
            t => format!("[{t}]"),
        };
        out.push_str(&format!(".SH {}\n", roff(&heading)));
        for (_, key, example, doc) in all_keys().into_iter().filter(|k| k.0 == table) {
            let default = defaults
                .get(table)
                .and_then(|t| t.get(key))
                .map(|d| format!(" Default: {d}."))
                .unwrap_or_default();
            out.push_str(&format!(
                ".TP\n\\fB{}\\fR = {}\n{}{}\n",
                roff(key),
                roff(example),
                roff(doc),
                roff(&default)
            ));
        }
    }
    out.push_str(
        ".SH POLICIES\nA policy table has \\fBkind\\fR and that kind's parameters, each optional, \
                  with these defaults (\\fBvadapt retune\\fR changes some at run time):\n",
    );
    for (kind, params) in policy_parameters() {
        let list = if params.is_empty() {
            "no parameters".to_string()
        } else {
            params
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            ".TP\nkind = \"{}\"\n{}\n",
            roff(kind),
            roff(&list)
        ));
    }
    out.push_str(
        ".SH EXAMPLE\n.nf\ncontrol = \"/run/vadapt/control.sock\"\nsocket_group = \"libvirt\\-qemu\"\n\
         [policy]\nkind = \"netap\"\n[[vm]]\nname = \"vm1\"\nsocket = \"/run/vadapt/vm1.sock\"\n\
         queues = 2\nmac = \"52:54:00:00:00:01\"\n[vm.limits]\nstorm_control_pps = 200\n.fi\n\
         .SH SEE ALSO\n\\fBvadapt\\-serve\\fR(1), \\fBvadapt\\-config\\fR(1), \\fBvadapt\\-reload\\fR(1)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{self, Deserialize, Deserializer, Visitor};
    use std::collections::BTreeSet;
    use vadapt_dataplane::config::{
        cores::CoresConfig, LocalPortConfig, PortLimits, TapPortConfig, UplinkPortConfig,
        VmPortConfig,
    };
    use vadapt_policy::vspace::ThresholdParams;

    /// The field names a `Deserialize` struct asks for: serde's derive hands
    /// them to `deserialize_struct`, which this deserializer records and stops.
    fn fields<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        struct Names<'a>(&'a mut Vec<&'static str>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Stop
            }
        }
        impl<'de> Deserializer<'de> for Names<'_> {
            type Error = Stop;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0.extend_from_slice(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        let mut names = Vec::new();
        let _ = T::deserialize(Names(&mut names));
        names
    }

    fn page_keys(table: &str) -> BTreeSet<&'static str> {
        all_keys()
            .into_iter()
            .filter(|k| k.0 == table)
            .map(|k| k.1)
            .collect()
    }

    #[test]
    fn every_table_lists_exactly_the_fields_its_type_takes() {
        let types: Vec<(&str, Vec<&str>)> = vec![
            ("", fields::<DaemonConfig>()),
            ("vm", fields::<VmPortConfig>()),
            ("sink", fields::<LocalPortConfig>()),
            ("echo", fields::<LocalPortConfig>()),
            ("tap", fields::<TapPortConfig>()),
            ("uplink", fields::<UplinkPortConfig>()),
            ("vm.limits", fields::<PortLimits>()),
            ("tap.limits", fields::<PortLimits>()),
            ("uplink.limits", fields::<PortLimits>()),
            ("cores", fields::<CoresConfig>()),
            ("cores.thresholds", fields::<ThresholdParams>()),
        ];
        let mut covered = BTreeSet::new();
        for (table, names) in types {
            assert!(!names.is_empty(), "[{table}]: no fields read from its type");
            let names: BTreeSet<&str> = names.into_iter().collect();
            assert_eq!(
                page_keys(table),
                names,
                "[{table}]: the page against the parser"
            );
            covered.insert(table);
        }
        let tables: BTreeSet<&str> = all_keys().into_iter().map(|k| k.0).collect();
        assert_eq!(tables, covered, "a table on the page with no type checked");
    }

    #[test]
    fn every_key_parses_with_its_example() {
        for (table, key, example, _) in all_keys() {
            let text = match table {
                "" => format!("{key} = {example}\n"),
                t => {
                    let (port, sub) = t.split_once('.').unwrap_or((t, ""));
                    // The port's required keys, less the one under test.
                    let required = PORT_TABLES.iter().find(|(p, _)| *p == port).map(|(_, r)| {
                        r.lines()
                            .filter(|l| !l.starts_with(&format!("{key} =")) || !sub.is_empty())
                            .collect::<Vec<_>>()
                            .join("\n")
                    });
                    match (required, sub) {
                        (Some(r), "") => format!("[[{port}]]\n{r}\n{key} = {example}\n"),
                        (Some(r), sub) => {
                            format!("[[{port}]]\n{r}\n[{port}.{sub}]\n{key} = {example}\n")
                        }
                        (None, _) => format!("[{t}]\n{key} = {example}\n"),
                    }
                }
            };
            toml::from_str::<DaemonConfig>(&text)
                .unwrap_or_else(|e| panic!("[{table}] {key} = {example}: {e}\n{text}"));
        }
    }

    #[test]
    fn the_page_names_every_key_and_the_defaults_come_from_the_types() {
        let page = render("test");
        for key in [
            "mac_ageing_s",
            "backlog",
            "margin",
            "slo_p95_us",
            "storm_control_pps",
        ] {
            assert!(page.contains(&format!("\\fB{}\\fR", roff(key))), "no {key}");
        }
        let d = defaults();
        assert_eq!(
            d[""]["mac_ageing_s"],
            DaemonConfig::default().mac_ageing_s.to_string()
        );
        assert_eq!(
            d["cores"]["margin"],
            CoresConfig::default().margin.to_string()
        );
        assert!(page.contains("[cores.thresholds]"), "{page}");
        for (kind, _) in policy_parameters() {
            assert!(
                page.contains(&format!("kind = \"{}\"", roff(kind))),
                "{kind}"
            );
        }
    }
}
