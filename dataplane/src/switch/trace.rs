//! `vadapt trace`: where a frame entering a port would go, and why, as the
//! switch's own decision ([`decide`], the one forwarding acts on) gives it,
//! against the table and the ports' rules as they are now. Nothing is
//! learned, counted or sent.

use super::fdb::VlanMac;
use super::frame_fate::{decide, egress_form, Fate, Target};
use super::learning_switch::Switch;
use super::port_rules::PortRules;
use super::vlan::{PortVlan, Retag, VlanRefusal};
use serde::{Deserialize, Serialize};
use vadapt_wire::Mac;

/// What the switch would do with one frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameTrace {
    /// The port it enters.
    pub port: String,
    /// Each check in the order the switch makes them: what it looked at,
    /// and what it found.
    pub steps: Vec<TraceStep>,
    /// The outcome in one line.
    pub verdict: String,
    /// The ports it leaves by, each with the form it leaves in.
    pub egress: Vec<TraceEgress>,
}

/// One check of a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStep {
    /// The check: `vlan`, `port security`, `table`, `ip source guard`.
    pub check: String,
    /// What it found.
    pub found: String,
}

/// A port a traced frame leaves by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEgress {
    /// The port.
    pub port: String,
    /// As it entered, a tag pushed, popped or rewritten.
    pub form: String,
}

/// Why a trace could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    /// No port of that name is on the switch.
    #[error("no port `{port}` on the switch (ports: {ports})")]
    NoPort {
        /// The name asked for.
        port: String,
        /// The ports there are, comma-separated.
        ports: String,
    },
}

impl FrameTrace {
    fn step(&mut self, check: &str, found: String) {
        self.steps.push(TraceStep {
            check: check.into(),
            found,
        });
    }

    /// The trace as lines for a terminal.
    pub fn to_text(&self) -> String {
        let mut s = format!("frame entering port {}\n", self.port);
        for st in &self.steps {
            s += &format!("  {:<16} {}\n", format!("{}:", st.check), st.found);
        }
        s += &format!("=> {}\n", self.verdict);
        for e in &self.egress {
            s += &format!("   -> {} ({})\n", e.port, e.form);
        }
        s
    }
}

/// How a port's VLAN rule reads.
fn vlan_rule(v: &PortVlan) -> String {
    match v {
        PortVlan::Access(0) => "access port, untagged domain".into(),
        PortVlan::Access(vid) => format!("access port of VLAN {vid}"),
        PortVlan::Trunk { native, .. } => format!("trunk, native VLAN {native}"),
    }
}

fn retag_form(r: Retag) -> String {
    match r {
        Retag::Keep => "as it entered".into(),
        Retag::Push(v) => format!("802.1Q tag {v} pushed"),
        Retag::Pop => "tag popped".into(),
        Retag::SetVid(v) => format!("priority tag's VID set to {v}"),
    }
}

impl Switch {
    /// Where `frame` entering the port named `port` would go now, and why
    /// (see the module docs).
    pub fn trace(&self, port: &str, frame: &[u8]) -> Result<FrameTrace, TraceError> {
        let t = self.tables();
        let name = |p: usize| {
            t.ports
                .get(p)
                .and_then(Option::as_ref)
                .map_or_else(|| format!("#{p}"), |e| e.stats.name.clone())
        };
        let Some(ingress) =
            (t.ports.iter()).position(|p| p.as_ref().is_some_and(|p| p.stats.name == port))
        else {
            let ports: Vec<String> = (t.ports.iter().flatten())
                .map(|p| p.stats.name.clone())
                .collect();
            return Err(TraceError::NoPort {
                port: port.into(),
                ports: ports.join(", "),
            });
        };
        let rules: &PortRules = &t.ports[ingress].as_ref().expect("found above").rules;
        let mut tr = FrameTrace {
            port: port.into(),
            ..FrameTrace::default()
        };
        let mut looked = Vec::new();
        let fate = decide(rules, ingress, frame, |addrs, vid| {
            let dst = Mac(addrs[..6].try_into().expect("6 bytes"));
            let src = Mac(addrs[6..].try_into().expect("6 bytes"));
            looked.push((
                "vlan",
                format!("entered VLAN {vid} (port: {})", vlan_rule(&rules.vlan)),
            ));
            if !rules.allows(src) {
                looked.push(("port security", format!("source {src} is not the port's")));
                return Target::Spoofed;
            }
            let security = if rules.owned.is_empty() {
                format!("source {src}: the port has no port security")
            } else {
                format!("source {src} is the port's own")
            };
            looked.push(("port security", security));
            let entry = |mac| t.fdb.get(&VlanMac::new(vid, mac));
            let learn = match entry(src) {
                _ if src.is_multicast() => "a group address: not learned".to_string(),
                Some(e) if e.port == ingress => format!("{src} already on this port"),
                Some(e) if e.is_static => {
                    format!("{src} is static on {}: not learned", name(e.port))
                }
                Some(e) => format!("{src} moves here from {}", name(e.port)),
                None => format!("{src} is learned here"),
            };
            looked.push(("learning", learn));
            // Forwarding learns the source before it looks the destination
            // up: a frame to its own source goes back to its port.
            let known = entry(dst).map(|e| (e.port, e.is_static));
            let known = known.or((dst == src && !src.is_multicast()).then_some((ingress, false)));
            let lookup = match known {
                _ if dst.is_multicast() => format!("{dst} is a group address: flooded"),
                Some((p, true)) => format!("{dst} in VLAN {vid}: static on {}", name(p)),
                Some((p, false)) => format!("{dst} in VLAN {vid}: learned on {}", name(p)),
                None => format!("{dst} in VLAN {vid}: unknown, flooded"),
            };
            looked.push(("table", lookup));
            Target::for_destination(dst, known.map(|k| k.0))
        });
        for (check, found) in looked {
            tr.step(check, found);
        }
        let guard = match (&rules.ip_guard, fate) {
            (_, Fate::Runt | Fate::Vlan(_) | Fate::Spoofed) => None,
            (None, _) => Some("none on this port".to_string()),
            (Some(_), Fate::Ip(why)) => Some(format!("refused: {why}")),
            (Some(_), _) => Some("admitted".to_string()),
        };
        if let Some(g) = guard {
            tr.step("ip source guard", g);
        }
        let send = |p: usize, entered, tr: &mut FrameTrace| {
            let Some(e) = t.ports.get(p).and_then(Option::as_ref) else {
                return;
            };
            if let Some(r) = egress_form(&e.rules, entered) {
                tr.egress.push(TraceEgress {
                    port: name(p),
                    form: retag_form(r),
                });
            }
        };
        tr.verdict = match fate {
            Fate::Runt => "dropped: shorter than an Ethernet header".into(),
            Fate::Vlan(VlanRefusal::Tagged) => {
                tr.step("vlan", format!("tagged (port: {})", vlan_rule(&rules.vlan)));
                "dropped: a tagged frame on an access port (vlan_tagged)".into()
            }
            Fate::Vlan(VlanRefusal::NotAllowed) => {
                tr.step(
                    "vlan",
                    format!(
                        "its tag's VLAN is not carried (port: {})",
                        vlan_rule(&rules.vlan)
                    ),
                );
                "dropped: a VLAN the trunk does not carry (vlan_not_allowed)".into()
            }
            Fate::Spoofed => "dropped by port security (spoofed_src)".into(),
            Fate::Ip(_) => "dropped by the IP source guard (spoofed_ip)".into(),
            Fate::Hairpin => "dropped: its destination is on the port it came from".into(),
            Fate::Port(p, entered) => {
                send(p, entered, &mut tr);
                if tr.egress.is_empty() {
                    format!("dropped: {} does not carry VLAN {}", name(p), entered.vid)
                } else {
                    format!("forwarded to {}", name(p))
                }
            }
            Fate::Flood(entered) => {
                for p in (0..t.ports.len()).filter(|&p| p != ingress) {
                    send(p, entered, &mut tr);
                }
                format!(
                    "flooded in VLAN {} to {} port(s) (storm control, if the port has it, \
                     may drop it)",
                    entered.vid,
                    tr.egress.len()
                )
            }
        };
        Ok(tr)
    }
}
