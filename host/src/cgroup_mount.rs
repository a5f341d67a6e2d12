//! Where the cgroup hierarchies are mounted and which version each is, from
//! `/proc/self/mountinfo` (its text is a parameter, so tests pass their own).
//!
//! Hosts mount cgroups three ways: v2 only (`cgroup2` on `/sys/fs/cgroup`,
//! current distributions), v1 only (one `cgroup` mount per controller), or
//! hybrid (v1 controllers plus an empty `cgroup2` on
//! `/sys/fs/cgroup/unified`). A controller is bound to one hierarchy at a
//! time, so a v1 mount with `cpuset` in its options is where cpusets are;
//! otherwise they are on the v2 mount, if its `cgroup.controllers` lists
//! `cpuset`.

use std::path::{Path, PathBuf};

/// A cgroup hierarchy's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// cgroup v1: a hierarchy per controller (or per set of controllers).
    V1,
    /// cgroup v2: the unified hierarchy.
    V2,
}

/// One cgroup filesystem mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// `cgroup` (v1) or `cgroup2` (v2).
    pub version: CgroupVersion,
    /// For v1, the controllers in the mount's options (`cpu`, `cpuset`,
    /// ...); empty for v2, whose controllers are in `cgroup.controllers`.
    pub controllers: Vec<String>,
}

impl CgroupMount {
    /// True for a v1 mount of the cpuset controller.
    pub fn is_v1_cpuset(&self) -> bool {
        self.version == CgroupVersion::V1 && self.controllers.iter().any(|c| c == "cpuset")
    }
}

/// v1 mount options that are not controllers.
const V1_NON_CONTROLLER_OPTIONS: &[&str] = &[
    "rw",
    "ro",
    "noprefix",
    "clone_children",
    "xattr",
    "cpuset_v2_mode",
    "favordynmods",
];

/// Undo mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The cgroup mounts listed in `mountinfo` (the text of
/// `/proc/self/mountinfo`), in its order. Lines that are not cgroup mounts,
/// or not well formed, are skipped.
pub fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // id parent major:minor root mount-point options [optional...] - fstype source super-options
            let (before, after) = line.split_once(" - ")?;
            let mount_point = before.split(' ').nth(4)?;
            let mut after = after.split(' ');
            let fstype = after.next()?;
            let _source = after.next()?;
            let options = after.next().unwrap_or("");
            let (version, controllers) = match fstype {
                "cgroup2" => (CgroupVersion::V2, Vec::new()),
                "cgroup" => (
                    CgroupVersion::V1,
                    options
                        .split(',')
                        .filter(|o| {
                            !o.is_empty()
                                && !o.contains('=')
                                && !V1_NON_CONTROLLER_OPTIONS.contains(o)
                        })
                        .map(str::to_string)
                        .collect(),
                ),
                _ => return None,
            };
            Some(CgroupMount {
                mount_point: unescape(mount_point),
                version,
                controllers,
            })
        })
        .collect()
}

/// Where cpusets are likely to be: the v1 mount of the cpuset controller if
/// there is one, else the first v2 mount (whose `cgroup.controllers` still
/// has to list `cpuset`).
pub fn find_cpuset_mount(mountinfo: &str) -> Option<CgroupMount> {
    let mounts = cgroup_mounts(mountinfo);
    mounts
        .iter()
        .find(|m| m.is_v1_cpuset())
        .or_else(|| mounts.iter().find(|m| m.version == CgroupVersion::V2))
        .cloned()
}

/// The cgroup mount `path` is on: the one whose mount point is the longest
/// prefix of it (by path components). `None` if `path` is on none.
pub fn mount_of(mountinfo: &str, path: &Path) -> Option<CgroupMount> {
    cgroup_mounts(mountinfo)
        .into_iter()
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.components().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This project's build machine: hybrid, cpuset on v1.
    const HYBRID: &str = "\
23 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// A systemd host with only cgroup v2.
    const UNIFIED: &str = "\
22 29 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn finds_cpusets_on_a_hybrid_host_in_v1() {
        let mounts = cgroup_mounts(HYBRID);
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[0].controllers, ["cpu"]);
        assert_eq!(mounts[3].controllers, Vec::<String>::new()); // name=systemd
        let m = find_cpuset_mount(HYBRID).unwrap();
        assert_eq!(m.mount_point, Path::new("/sys/fs/cgroup/cpuset"));
        assert_eq!(m.version, CgroupVersion::V1);
        assert!(m.is_v1_cpuset());
        let m = mount_of(HYBRID, Path::new("/sys/fs/cgroup/cpuset/vadapt")).unwrap();
        assert!(m.is_v1_cpuset());
        let m = mount_of(HYBRID, Path::new("/sys/fs/cgroup/unified/vadapt")).unwrap();
        assert_eq!(m.version, CgroupVersion::V2);
        let m = mount_of(HYBRID, Path::new("/sys/fs/cgroup/cpu/vadapt")).unwrap();
        assert!(!m.is_v1_cpuset());
        // A prefix by characters is not a prefix by components.
        assert!(mount_of(HYBRID, Path::new("/sys/fs/cgroup/cpusetx")).is_none());
        assert!(mount_of(HYBRID, Path::new("/tmp")).is_none());
    }

    #[test]
    fn finds_cpusets_on_a_unified_host_in_v2() {
        let m = find_cpuset_mount(UNIFIED).unwrap();
        assert_eq!(m.mount_point, Path::new("/sys/fs/cgroup"));
        assert_eq!(m.version, CgroupVersion::V2);
        assert_eq!(
            mount_of(UNIFIED, Path::new("/sys/fs/cgroup/vadapt.slice"))
                .unwrap()
                .version,
            CgroupVersion::V2
        );
        assert!(find_cpuset_mount("").is_none());
        assert!(find_cpuset_mount("garbage\n - \n1 2 3").is_none());
    }

    #[test]
    fn unescapes_mount_points() {
        let info = r"50 31 0:40 / /tmp/my\040cgroups rw - cgroup2 none rw";
        assert_eq!(
            cgroup_mounts(info)[0].mount_point,
            Path::new("/tmp/my cgroups")
        );
        assert_eq!(unescape(r"a\13x\134"), Path::new(r"a\13x\"));
    }

    #[test]
    fn reads_this_hosts_mountinfo() {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        for m in cgroup_mounts(&info) {
            assert!(m.mount_point.is_absolute(), "{m:?}");
        }
    }
}
