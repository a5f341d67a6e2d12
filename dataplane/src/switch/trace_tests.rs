//! `vadapt trace` against forwarding: for frames of every fate (switched,
//! flooded across access ports and a trunk, dropped by each rule), the
//! ports a trace names are the ports forwarding then hands the frame to,
//! and the reason it gives is the rule that dropped it.

use super::test_utils::Recorder;
use super::*;
use crate::frames::FrameBatch;
use crate::metrics::PortStats;
use std::sync::Arc;
use std::time::Duration;
use vadapt_wire::{IpPrefix, Mac};

const VM1: Mac = Mac([2, 0, 0, 0, 0, 0xa1]);
const VM2: Mac = Mac([2, 0, 0, 0, 0, 0xa2]);

struct Rig {
    sw: Switch,
    ports: Vec<(String, PortId, Arc<Recorder>)>,
}

impl Rig {
    fn new() -> Self {
        let sw = Switch::new(Duration::from_secs(300));
        let mut ports = Vec::new();
        let guarded = PortRules {
            owned: vec![VM1],
            ip_guard: Some(SourceGuard::new(
                &["10.0.0.5".parse::<IpPrefix>().unwrap()],
                &[VM1],
            )),
            ..PortRules::default()
        };
        let trunk = PortVlan::Trunk {
            allowed: [7].into_iter().collect(),
            native: 0,
        };
        for (name, rules) in [
            ("vm1", guarded),
            (
                "vm2",
                PortRules {
                    owned: vec![VM2],
                    ..PortRules::default()
                },
            ),
            ("t0", PortRules::open_in(trunk)),
            ("a7", PortRules::open_in(PortVlan::Access(7))),
        ] {
            let rec = Arc::new(Recorder::default());
            let stats = Arc::new(PortStats::new(name, crate::metrics::PortKind::Vm, 1));
            let id = sw.add_port_with(rec.clone(), stats, rules);
            ports.push((name.to_string(), id, rec));
        }
        Rig { sw, ports }
    }

    /// The trace of `spec` entering `port`, then where forwarding sent the
    /// same frame: (trace, the ports that got it).
    fn both(&self, port: &str, spec: &str) -> (FrameTrace, Vec<String>) {
        let frame = spec.parse::<FrameSpec>().unwrap().build().unwrap();
        let trace = self.sw.trace(port, &frame).unwrap();
        let before: Vec<usize> = self
            .ports
            .iter()
            .map(|p| p.2 .0.lock().unwrap().len())
            .collect();
        let id = self.ports.iter().find(|p| p.0 == port).unwrap().1;
        let mut batch = FrameBatch::new(1);
        batch.push(&frame);
        let _ = self.sw.forward(id, 0, &batch, &mut FdbCache::default());
        let got = (self.ports.iter().zip(before))
            .filter(|(p, n)| p.2 .0.lock().unwrap().len() > *n)
            .map(|(p, _)| p.0.clone())
            .collect();
        (trace, got)
    }
}

fn egress(t: &FrameTrace) -> Vec<String> {
    t.egress.iter().map(|e| e.port.clone()).collect()
}

fn found(t: &FrameTrace, check: &str) -> String {
    let step = t.steps.iter().find(|s| s.check == check);
    step.map_or_else(
        || panic!("no `{check}` in {}", t.to_text()),
        |s| s.found.clone(),
    )
}

#[test]
fn a_trace_names_the_ports_forwarding_then_sends_the_frame_to() {
    let rig = Rig::new();
    let to_vm2 = format!("src={VM1},dst={VM2},ip_src=10.0.0.5");
    let cases: Vec<(&str, String, &str)> = vec![
        ("vm1", to_vm2.clone(), "forwarded to vm2"),
        (
            "vm1",
            format!("src={VM1},dst=ff:ff:ff:ff:ff:ff,ip_src=10.0.0.5,arp"),
            "flooded in VLAN 0",
        ),
        (
            "vm1",
            format!("src={VM2},dst=ff:ff:ff:ff:ff:ff"),
            "port security",
        ),
        (
            "vm1",
            format!("src={VM1},dst={VM2},ip_src=10.0.0.9"),
            "IP source guard",
        ),
        ("vm1", format!("src={VM1},dst={VM2},vlan=7"), "vlan_tagged"),
        (
            "t0",
            "src=02:00:00:00:00:77,dst=ff:ff:ff:ff:ff:ff,vlan=7".to_string(),
            "flooded in VLAN 7",
        ),
        (
            "t0",
            "src=02:00:00:00:00:77,dst=ff:ff:ff:ff:ff:ff,vlan=9".to_string(),
            "vlan_not_allowed",
        ),
        (
            "a7",
            "src=02:00:00:00:00:07,dst=02:00:00:00:00:77".to_string(),
            "forwarded to t0",
        ),
        ("vm2", format!("src={VM2},dst={VM2}"), "came from"),
        (
            "vm2",
            format!("src={VM2},dst=02:00:00:00:00:99"),
            "flooded in VLAN 0",
        ),
    ];
    for (port, spec, verdict) in cases {
        let (trace, got) = rig.both(port, &spec);
        assert!(
            trace.verdict.contains(verdict),
            "{port} {spec}:\n{}",
            trace.to_text()
        );
        assert_eq!(egress(&trace), got, "{port} {spec}:\n{}", trace.to_text());
    }
    // The steps say why, in the switch's order.
    let (t, _) = rig.both("vm1", &to_vm2);
    let checks: Vec<_> = t.steps.iter().map(|s| s.check.as_str()).collect();
    assert_eq!(
        checks,
        [
            "vlan",
            "port security",
            "learning",
            "table",
            "ip source guard"
        ]
    );
    assert!(
        found(&t, "table").contains("static on vm2"),
        "{}",
        t.to_text()
    );
    assert_eq!(found(&t, "ip source guard"), "admitted");
    let (t, _) = rig.both("vm1", &format!("src={VM1},dst={VM2},ip_src=10.0.0.9"));
    assert!(
        found(&t, "ip source guard").contains("10.0.0.9"),
        "{}",
        t.to_text()
    );
    // What t0 learned from its flood above: a7's frame is switched to it,
    // the tag pushed on the way.
    let (t, _) = rig.both("a7", "src=02:00:00:00:00:07,dst=02:00:00:00:00:77");
    assert!(
        found(&t, "table").contains("learned on t0"),
        "{}",
        t.to_text()
    );
    assert_eq!(t.egress[0].form, "802.1Q tag 7 pushed");
    // A flood in VLAN 7 from the trunk leaves a7 untagged, and no VLAN 0 port.
    let (t, _) = rig.both("t0", "src=02:00:00:00:00:77,dst=ff:ff:ff:ff:ff:ff,vlan=7");
    assert_eq!(egress(&t), ["a7"]);
    assert_eq!(t.egress[0].form, "tag popped");
}

#[test]
fn a_trace_learns_nothing_and_refuses_an_unknown_port() {
    let rig = Rig::new();
    let frame = format!("src=02:00:00:00:00:55,dst={VM1}")
        .parse::<FrameSpec>()
        .unwrap();
    let t = rig.sw.trace("vm2", &frame.build().unwrap());
    assert!(t.unwrap().verdict.contains("port security"));
    let t = rig.sw.trace("t0", &frame.build().unwrap()).unwrap();
    assert!(
        found(&t, "learning").contains("is learned here"),
        "{}",
        t.to_text()
    );
    assert_eq!(
        rig.sw.lookup(Mac([2, 0, 0, 0, 0, 0x55])),
        None,
        "a trace learns nothing"
    );
    let e = rig.sw.trace("nope", &frame.build().unwrap()).unwrap_err();
    assert!(e.to_string().contains("vm1, vm2, t0, a7"), "{e}");
    let t = rig.sw.trace("vm1", &[1, 2, 3]).unwrap();
    assert!(t.verdict.contains("shorter"), "{}", t.to_text());
}
