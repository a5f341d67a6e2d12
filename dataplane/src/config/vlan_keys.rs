//! The VLAN keys of a port's configuration, as OVS spells them (issue 37):
//! `vlan=N` (an access port: VM, echo, sink and TAP ports), `trunks=` and
//! `native_vlan=` (a trunk: TAP and uplink ports). What they mean is in
//! the switch's `PortVlan` (`switch/vlan.rs`), which is made from them;
//! this file reads and checks them.
//!
//! In a spec, `trunks=` lists VLANs separated by `:` (`,` separates the
//! spec's keys), with ranges: `trunks=10:20:100-199`. In TOML it is a
//! list of numbers: `trunks = [10, 20]`.

use super::error::{field, ConfigError, FieldError};

/// A VLAN id: 1..=[`MAX_VID`], or 0 for the untagged domain.
pub type Vid = u16;

/// The highest VLAN id a port may name (4095 is reserved).
pub const MAX_VID: Vid = 4094;

/// Reads VLAN id `v` of key `flag` (1..=4094).
pub fn parse_vid(flag: &str, v: &str) -> Result<Vid, ConfigError> {
    let vid = v.parse::<Vid>().map_err(|_| {
        field(
            flag,
            FieldError::NotAVlanId {
                value: v.to_owned(),
                max: MAX_VID,
            },
        )
    })?;
    check_vid(flag, vid)?;
    Ok(vid)
}

fn check_vid(flag: &str, vid: Vid) -> Result<(), ConfigError> {
    if (1..=MAX_VID).contains(&vid) {
        Ok(())
    } else {
        Err(field(
            flag,
            FieldError::ReservedVlanId { vid, max: MAX_VID },
        ))
    }
}

/// Reads a spec's `trunks=` list (`10:20:100-199`), sorted, each once.
pub fn parse_trunks(flag: &str, v: &str) -> Result<Vec<Vid>, ConfigError> {
    let mut out = Vec::new();
    for part in v.split(':') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse_vid(flag, a)?, parse_vid(flag, b)?);
                if a > b {
                    return Err(field(flag, FieldError::BackwardsRange(part.to_owned())));
                }
                out.extend(a..=b);
            }
            None => out.push(parse_vid(flag, part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The VLAN keys of one port, checked together: `prefix` is `--tap `,
/// `tap.`, ... for errors, `port` the port's name.
#[derive(Clone, Copy, Debug)]
pub struct VlanKeys<'a> {
    /// `vlan=`: an access port of that VLAN.
    pub vlan: Option<Vid>,
    /// `trunks=`: the tagged VLANs of a trunk (empty: all).
    pub trunks: &'a [Vid],
    /// `native_vlan=`: a trunk's untagged VLAN.
    pub native_vlan: Option<Vid>,
}

impl VlanKeys<'_> {
    /// Checks the keys: every id in range, and `vlan` not with the trunk
    /// keys.
    pub fn check(&self, prefix: &str, port: &str) -> Result<(), ConfigError> {
        if let Some(v) = self.vlan {
            check_vid(&format!("{prefix}vlan"), v)?;
            if !self.trunks.is_empty() || self.native_vlan.is_some() {
                return Err(field(
                    format!("{prefix}vlan"),
                    FieldError::AccessWithTrunk(port.to_owned()),
                ));
            }
        }
        for &v in self.trunks {
            check_vid(&format!("{prefix}trunks"), v)?;
        }
        if let Some(v) = self.native_vlan {
            check_vid(&format!("{prefix}native_vlan"), v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trunk_lists_take_ranges_and_refuse_reserved_ids() {
        assert_eq!(
            parse_trunks("t", "20:10:12-14:10").unwrap(),
            [10, 12, 13, 14, 20]
        );
        for bad in ["0", "4095", "x", "5-3", "", "1:"] {
            assert!(parse_trunks("--tap trunks", bad).is_err(), "{bad}");
        }
        let e = parse_vid("--vm vlan", "4095").unwrap_err().to_string();
        assert!(e.contains("--vm vlan") && e.contains("reserved"), "{e}");
    }

    #[test]
    fn vlan_does_not_mix_with_trunk_keys() {
        let k = |vlan, trunks: &'static [Vid], native_vlan| VlanKeys {
            vlan,
            trunks,
            native_vlan,
        };
        let e = k(Some(7), &[10], None)
            .check("--tap ", "t0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tap vlan") && e.contains("`t0`"), "{e}");
        assert!(k(Some(7), &[], Some(8)).check("tap.", "t0").is_err());
        assert!(k(Some(0), &[], None).check("vm.", "v").is_err());
        assert!(k(None, &[10], Some(4095)).check("tap.", "t0").is_err());
        assert!(k(None, &[10], Some(30)).check("tap.", "t0").is_ok());
    }
}
