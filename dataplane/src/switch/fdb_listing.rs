//! What `vadapt fdb` prints: a copy of the forwarding table, each address
//! with its port and VLAN, whether it is static or learned, and its age.

use serde::{Deserialize, Serialize};
use vadapt_wire::Mac;

/// The table, as the control socket's `fdb` request answers it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FdbListing {
    /// Every address, by port name, then address.
    pub entries: Vec<FdbRow>,
    /// Learned addresses in the table (static ones are not counted).
    pub learned: usize,
    /// Most learned addresses the table takes (`mac_table_size`).
    pub table_size: usize,
}

/// One address of [`FdbListing`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbRow {
    /// The port's name.
    pub port: String,
    /// The VLAN (0: the untagged domain).
    #[serde(default)]
    pub vlan: u16,
    /// The address.
    pub mac: Mac,
    /// Static or learned.
    pub kind: EntryKind,
    /// Seconds since a frame last refreshed it (learned), or since it was
    /// pinned or moved to its port (static).
    pub age_s: u64,
}

/// How an address came to be in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// Pinned: a port's owned address (`mac=`, `allowed_macs=`), a sink's
    /// or echo's. Never ages; no other port takes it.
    Static,
    /// Learned from a frame's source; ages out (`mac_ageing_s`).
    Learned,
}

impl EntryKind {
    /// `static` or `learned`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Static => "static",
            EntryKind::Learned => "learned",
        }
    }
}

impl FdbListing {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<12} {:>4} {:<17} {:<7} {:>8}",
            "port", "vlan", "mac", "kind", "age_s"
        );
        for e in &self.entries {
            let _ = writeln!(
                s,
                "{:<12} {:>4} {:<17} {:<7} {:>8}",
                e.port,
                e.vlan,
                // Mac's Display ignores width: pad its string.
                e.mac.to_string(),
                e.kind.as_str(),
                e.age_s
            );
        }
        let _ = writeln!(
            s,
            "\n{} learned of at most {} (mac_table_size); {} static",
            self.learned,
            self.table_size,
            self.entries.len().saturating_sub(self.learned)
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_port_address_kind_and_age() {
        let l = FdbListing {
            entries: vec![FdbRow {
                port: "vm1".into(),
                vlan: 10,
                mac: Mac([2, 0, 0, 0, 0, 0xa1]),
                kind: EntryKind::Static,
                age_s: 12,
            }],
            learned: 0,
            table_size: 8192,
        };
        let t = l.to_table();
        assert!(
            t.contains("vm1") && t.contains("02:00:00:00:00:a1") && t.contains("static"),
            "{t}"
        );
        assert!(t.contains("0 learned of at most 8192"), "{t}");
        assert!(t.contains("  10 02:00"), "{t}");
        let json = serde_json::to_string(&l).unwrap();
        assert!(json.contains("\"kind\":\"static\""), "{json}");
        assert_eq!(serde_json::from_str::<FdbListing>(&json).unwrap(), l);
    }
}
