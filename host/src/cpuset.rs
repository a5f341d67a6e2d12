//! vSPACE's groups as cgroup cpusets, the paper's mechanism (§5: "we employ
//! CPUSET"): one cgroup per [`ThreadGroup`] under a configured parent, its
//! `cpuset.cpus` set to the group's cores, its threads moved into it.
//!
//! ```text
//!   v2 (threaded mode)                      v1
//!   <parent>/            threaded domain    <parent>/          cpuset.cpus, cpuset.mems set
//!     cgroup.subtree_control  +cpuset         vcpu/ nq/ be/
//!     cgroup.procs       QEMU, vadapt           cpuset.cpus    the group's cores
//!     vcpu/ nq/ be/                             cpuset.mems    copied from the parent
//!       cgroup.type      threaded               tasks          one tid per write
//!       cpuset.cpus      the group's cores
//!       cgroup.threads   one tid per write
//! ```
//!
//! The version is that of the mount the parent is on
//! ([`mount_of`]). The parent must exist
//! (created and, unless we are root, delegated by the administrator or
//! systemd); [`CpusetGroups::open`] checks it offers cpusets and creates the
//! three groups, idempotently.
//!
//! In v2 a thread can only move within its process's threaded subtree, so
//! each managed process (QEMU, vadapt) must first be in the parent:
//! [`CpusetGroups::adopt_process`], once at start-up (it moves *every*
//! thread of the process to the parent, undoing earlier placements). v1 has
//! no such rule.
//!
//! `cpuset.cpus` is rewritten only when it changes: each write rebuilds the
//! kernel's scheduling domains. An empty set is refused ([`CpusetError::EmptySet`]):
//! v1 rejects it once the group has threads, and v2 reads it as "the
//! parent's CPUs", the opposite of a group with no cores.
//!
//! **Tested against fake trees of plain files**, which accept what the
//! kernel would not. The kernel also rejects:
//! - v1: moving a thread into a group whose `cpuset.cpus` or `cpuset.mems`
//!   is empty (`ENOSPC`); a `cpuset.cpus` that is not a subset of the
//!   parent's (`EINVAL`) or names an offline CPU.
//! - v2: `cgroup.type` = `threaded` when the parent has a domain controller
//!   (`memory`, `io`, ...) in its `cgroup.subtree_control` (`EOPNOTSUPP`);
//!   `+cpuset` when the grandparent does not delegate it (`ENOENT`); a tid
//!   whose process is not in the parent's threaded subtree (`EOPNOTSUPP`).
//! - both: a tid that has exited (`ESRCH`); writes without write permission
//!   on the files or, in v2, on the common ancestor's `cgroup.procs`
//!   (`EACCES`, `EPERM`).
//!
//! And the fake does not do what the kernel does: a file listing members
//! (`tasks`, `cgroup.threads`) keeps every tid written to it, where the
//! kernel lists current members; `mkdir` creates no interface files, so a
//! missing file reads as empty here (the kernel always has them); writing
//! `+cpuset` leaves that text rather than `cpuset`.

use crate::cgroup_mount::{mount_of, CgroupVersion};
use crate::cpu_list::{format_cpu_list, parse_cpu_list, CpuListError};
use crate::thread_group::{TaskId, ThreadGroup};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A cpuset operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CpusetError {
    /// The parent is not under any cgroup mount.
    #[error("{path} is not on a cgroup filesystem")]
    NotCgroup {
        /// The parent.
        path: PathBuf,
    },
    /// The parent is on a v1 hierarchy of other controllers.
    #[error("{path} is on a cgroup v1 hierarchy without the cpuset controller")]
    NotCpusetHierarchy {
        /// The parent.
        path: PathBuf,
    },
    /// The parent does not exist.
    #[error("the cpuset parent {path} does not exist (create and delegate it first)")]
    NoParent {
        /// The parent.
        path: PathBuf,
    },
    /// v2: the parent's `cgroup.controllers` does not list `cpuset`.
    #[error(
        "the cpuset controller is not available in {path} (cgroup.controllers: {controllers:?})"
    )]
    NoCpusetController {
        /// The parent.
        path: PathBuf,
        /// What `cgroup.controllers` lists.
        controllers: String,
    },
    /// v1: the parent's `cpuset.cpus` is empty, so its children could have none.
    #[error("{path} is empty: the parent has no CPUs")]
    NoCpus {
        /// The parent's `cpuset.cpus`.
        path: PathBuf,
    },
    /// v1: the parent's `cpuset.mems` is empty, so its children could hold no threads.
    #[error("{path} is empty: the parent has no memory nodes")]
    NoMems {
        /// The parent's `cpuset.mems`.
        path: PathBuf,
    },
    /// Reading a cgroup file failed.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A cgroup file held something other than a CPU list.
    #[error("failed to parse {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: CpuListError,
    },
    /// Creating a group's directory failed.
    #[error("failed to create {path}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing a cgroup file failed; see [`CpusetError::is_gone`] and
    /// [`CpusetError::is_refused`].
    #[error("failed to write {value:?} to {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A thread's cgroup file names no cgroup of this hierarchy.
    #[error("{path} names no cgroup of the cpuset hierarchy")]
    NoCgroupLine {
        /// The file.
        path: PathBuf,
    },
    /// A group was given no CPUs. See the module documentation.
    #[error("no CPUs given for the {group} group")]
    EmptySet {
        /// The group's name.
        group: &'static str,
    },
}

impl CpusetError {
    fn errno(&self) -> Option<i32> {
        match self {
            CpusetError::Write { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True if a thread being moved has exited (`ESRCH`).
    pub fn is_gone(&self) -> bool {
        self.errno() == Some(libc::ESRCH)
    }

    /// True if the kernel refused a write: permissions (`EPERM`, `EACCES`)
    /// or one of the rules of the module documentation (`EINVAL`,
    /// `EOPNOTSUPP`, `ENOSPC`, `EBUSY`).
    pub fn is_refused(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc::EPERM)
                | Some(libc::EACCES)
                | Some(libc::EINVAL)
                | Some(libc::EOPNOTSUPP)
                | Some(libc::ENOSPC)
                | Some(libc::EBUSY)
        )
    }
}

/// The text of a cgroup file, trimmed; a missing file reads as empty (only
/// fake trees lack files, see the module documentation).
fn read(path: PathBuf) -> Result<String, CpusetError> {
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(s.trim().to_string()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(CpusetError::Read { path, source }),
    }
}

/// One `write(2)` of `value` to a cgroup file. Append mode so that a fake
/// tree keeps every tid written; the kernel ignores the file position.
fn write(path: PathBuf, value: String) -> Result<(), CpusetError> {
    let result = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()));
    result.map_err(|source| CpusetError::Write {
        path,
        value,
        source,
    })
}

/// The three vSPACE groups as cpusets under one parent. See the module
/// documentation.
#[derive(Clone, Debug)]
pub struct CpusetGroups {
    version: CgroupVersion,
    parent: PathBuf,
    /// Where the parent's hierarchy is mounted: a path in
    /// `/proc/<pid>/task/<tid>/cgroup` is relative to it.
    mount_point: PathBuf,
}

impl CpusetGroups {
    /// Check that `parent` (an existing cgroup directory, e.g.
    /// `/sys/fs/cgroup/vadapt` or `/sys/fs/cgroup/cpuset/vadapt`) offers
    /// cpusets and create the `vcpu`, `nq` and `be` groups under it.
    /// `mountinfo` is the text of `/proc/self/mountinfo`, which says the
    /// cgroup version. Idempotent: existing groups are kept as they are.
    pub fn open(parent: &Path, mountinfo: &str) -> Result<CpusetGroups, CpusetError> {
        let path = parent.to_path_buf();
        let mount = mount_of(mountinfo, parent)
            .ok_or_else(|| CpusetError::NotCgroup { path: path.clone() })?;
        if mount.version == CgroupVersion::V1 && !mount.is_v1_cpuset() {
            return Err(CpusetError::NotCpusetHierarchy { path });
        }
        if !parent.is_dir() {
            return Err(CpusetError::NoParent { path });
        }
        let groups = CpusetGroups {
            version: mount.version,
            parent: path,
            mount_point: mount.mount_point.clone(),
        };
        match groups.version {
            CgroupVersion::V2 => groups.prepare_v2_parent()?,
            CgroupVersion::V1 => {
                // Children's CPUs must be a subset of the parent's.
                let cpus = groups.parent.join("cpuset.cpus");
                if read(cpus.clone())?.is_empty() {
                    return Err(CpusetError::NoCpus { path: cpus });
                }
            }
        }
        for group in ThreadGroup::ALL {
            groups.ensure(group)?;
        }
        Ok(groups)
    }

    fn prepare_v2_parent(&self) -> Result<(), CpusetError> {
        let controllers = read(self.parent.join("cgroup.controllers"))?;
        if !controllers.split_whitespace().any(|c| c == "cpuset") {
            return Err(CpusetError::NoCpusetController {
                path: self.parent.clone(),
                controllers,
            });
        }
        let subtree = self.parent.join("cgroup.subtree_control");
        if !read(subtree.clone())?
            .split_whitespace()
            .any(|c| c == "cpuset" || c == "+cpuset")
        {
            write(subtree, "+cpuset".to_string())?;
        }
        Ok(())
    }

    /// Create `group`'s cgroup if it does not exist and make it usable:
    /// v2 `threaded`, v1 with the parent's memory nodes.
    fn ensure(&self, group: ThreadGroup) -> Result<(), CpusetError> {
        let dir = self.dir(group);
        if let Err(source) = std::fs::create_dir(&dir) {
            if source.kind() != io::ErrorKind::AlreadyExists {
                return Err(CpusetError::Create { path: dir, source });
            }
        }
        match self.version {
            CgroupVersion::V2 => {
                if read(dir.join("cgroup.type"))? != "threaded" {
                    write(dir.join("cgroup.type"), "threaded".to_string())?;
                }
            }
            CgroupVersion::V1 => {
                if read(dir.join("cpuset.mems"))?.is_empty() {
                    let mems_path = self.parent.join("cpuset.mems");
                    let mems = read(mems_path.clone())?;
                    if mems.is_empty() {
                        return Err(CpusetError::NoMems { path: mems_path });
                    }
                    write(dir.join("cpuset.mems"), mems)?;
                }
            }
        }
        Ok(())
    }

    /// The cgroup version of the parent's hierarchy.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The parent directory.
    pub fn parent(&self) -> &Path {
        &self.parent
    }

    /// The directory of `group`'s cgroup (`<parent>/<name>`).
    pub fn dir(&self, group: ThreadGroup) -> PathBuf {
        self.parent.join(group.name())
    }

    /// Let `group`'s threads run on `cpus` only. Returns false, writing
    /// nothing, if that is already its set.
    pub fn set_cpus(&self, group: ThreadGroup, cpus: &[usize]) -> Result<bool, CpusetError> {
        if cpus.is_empty() {
            return Err(CpusetError::EmptySet {
                group: group.name(),
            });
        }
        let path = self.dir(group).join("cpuset.cpus");
        let current = read(path.clone())?;
        let current = parse_cpu_list(&current).map_err(|source| CpusetError::Parse {
            path: path.clone(),
            source,
        })?;
        let mut wanted = cpus.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        if current == wanted {
            return Ok(false);
        }
        write(path, format_cpu_list(&wanted))?;
        Ok(true)
    }

    /// Move thread `tid` (of any process) into `group`.
    pub fn move_thread(&self, group: ThreadGroup, tid: u32) -> Result<(), CpusetError> {
        self.move_thread_to(&self.dir(group), tid)
    }

    /// The directory of the cgroup that `task` is in, in this hierarchy,
    /// from `<proc_root>/<pid>/task/<tid>/cgroup` (v1: the line naming the
    /// `cpuset` controller; v2: the `0::` line). Read before a thread is
    /// first moved, so that [`CpusetGroups::move_thread_to`] can put it
    /// back. The hierarchy is taken to be mounted at its root, as on a
    /// host; elsewhere the directory may not exist and putting back fails.
    pub fn cgroup_of(&self, proc_root: &Path, task: TaskId) -> Result<PathBuf, CpusetError> {
        let path = proc_root
            .join(task.pid.to_string())
            .join("task")
            .join(task.tid.to_string())
            .join("cgroup");
        let text = std::fs::read_to_string(&path).map_err(|source| CpusetError::Read {
            path: path.clone(),
            source,
        })?;
        let found = text.lines().find_map(|line| {
            let mut f = line.splitn(3, ':');
            let (_, controllers, cgroup) = (f.next()?, f.next()?, f.next()?);
            let ours = match self.version {
                CgroupVersion::V2 => controllers.is_empty(),
                CgroupVersion::V1 => controllers.split(',').any(|c| c == "cpuset"),
            };
            ours.then(|| cgroup.trim_start_matches('/').to_string())
        });
        match found {
            // `..` in a path from /proc would be a kernel bug; refuse it anyway.
            Some(rel) if !rel.split('/').any(|c| c == "..") => Ok(self.mount_point.join(rel)),
            _ => Err(CpusetError::NoCgroupLine { path }),
        }
    }

    /// Move thread `tid` into the cgroup at `dir` (one that
    /// [`CpusetGroups::cgroup_of`] gave).
    pub fn move_thread_to(&self, dir: &Path, tid: u32) -> Result<(), CpusetError> {
        let file = match self.version {
            CgroupVersion::V2 => "cgroup.threads",
            CgroupVersion::V1 => "tasks",
        };
        write(dir.join(file), tid.to_string())
    }

    /// v2: move process `pid` (all its threads) into the parent, so that its
    /// threads can then be moved into the groups. Call once per process at
    /// start-up. v1: nothing to do.
    pub fn adopt_process(&self, pid: u32) -> Result<(), CpusetError> {
        match self.version {
            CgroupVersion::V2 => write(self.parent.join("cgroup.procs"), pid.to_string()),
            CgroupVersion::V1 => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    fn mountinfo(root: &Path, fstype: &str, options: &str) -> String {
        format!(
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
             41 31 0:38 / {} rw,relatime - {fstype} {fstype} {options}\n",
            root.display()
        )
    }

    fn v2_tree() -> (TestDir, String) {
        let t = TestDir::new("cgroup2");
        t.write("cgroup.controllers", "cpuset cpu io memory pids\n");
        t.write("vadapt/cgroup.controllers", "cpuset cpu\n");
        t.write("vadapt/cgroup.subtree_control", "\n");
        t.write("vadapt/cgroup.type", "domain\n");
        let info = mountinfo(&t.0, "cgroup2", "rw,nsdelegate");
        (t, info)
    }

    fn v1_tree() -> (TestDir, String) {
        let t = TestDir::new("cgroup1");
        t.write("cpuset.cpus", "0-7\n");
        t.write("cpuset.mems", "0-1\n");
        t.write("vadapt/cpuset.cpus", "0-5\n");
        t.write("vadapt/cpuset.mems", "0\n");
        let info = mountinfo(&t.0, "cgroup", "rw,cpuset");
        (t, info)
    }

    #[test]
    fn v2_threaded_groups_cpus_and_threads() {
        let (t, info) = v2_tree();
        let g = CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap();
        assert_eq!(g.version(), CgroupVersion::V2);
        assert_eq!(t.read("vadapt/cgroup.subtree_control"), "\n+cpuset");
        for name in ["vcpu", "nq", "be"] {
            assert_eq!(t.read(&format!("vadapt/{name}/cgroup.type")), "threaded");
        }

        g.adopt_process(4200).unwrap();
        assert_eq!(t.read("vadapt/cgroup.procs"), "4200");
        assert!(g.set_cpus(ThreadGroup::Vcpu, &[3, 2, 4]).unwrap());
        assert_eq!(t.read("vadapt/vcpu/cpuset.cpus"), "2-4");
        // Unchanged: not rewritten.
        assert!(!g.set_cpus(ThreadGroup::Vcpu, &[2, 3, 4]).unwrap());
        g.move_thread(ThreadGroup::Vcpu, 4243).unwrap();
        g.move_thread(ThreadGroup::Vcpu, 4244).unwrap();
        g.move_thread(ThreadGroup::Nq, 77).unwrap();
        // One write per tid (the fake keeps them all).
        assert_eq!(t.read("vadapt/vcpu/cgroup.threads"), "42434244");
        assert_eq!(t.read("vadapt/nq/cgroup.threads"), "77");
        assert!(matches!(
            g.set_cpus(ThreadGroup::Be, &[]),
            Err(CpusetError::EmptySet { group: "be" })
        ));

        // Opening again (a restart) keeps what is there, as the kernel shows it.
        t.write("vadapt/cgroup.subtree_control", "cpuset\n");
        CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap();
        assert_eq!(t.read("vadapt/cgroup.subtree_control"), "cpuset\n");
        assert_eq!(t.read("vadapt/vcpu/cgroup.type"), "threaded");
        assert_eq!(t.read("vadapt/vcpu/cpuset.cpus"), "2-4");
    }

    #[test]
    fn v1_groups_get_the_parents_mems() {
        let (t, info) = v1_tree();
        let g = CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap();
        assert_eq!(g.version(), CgroupVersion::V1);
        for name in ["vcpu", "nq", "be"] {
            assert_eq!(t.read(&format!("vadapt/{name}/cpuset.mems")), "0");
        }
        g.adopt_process(4200).unwrap();
        assert!(!t.0.join("vadapt/cgroup.procs").exists());
        assert!(g.set_cpus(ThreadGroup::Nq, &[0]).unwrap());
        assert!(g.set_cpus(ThreadGroup::Vcpu, &[1, 2, 3, 5]).unwrap());
        assert_eq!(t.read("vadapt/vcpu/cpuset.cpus"), "1-3,5");
        g.move_thread(ThreadGroup::Nq, 77).unwrap();
        assert_eq!(t.read("vadapt/nq/tasks"), "77");
        assert_eq!(g.dir(ThreadGroup::Be), t.0.join("vadapt/be"));

        // A group's cpuset.mems already set is kept.
        t.write("vadapt/be/cpuset.mems", "0-1\n");
        CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap();
        assert_eq!(t.read("vadapt/be/cpuset.mems"), "0-1\n");
        // What the kernel holds is parsed before comparing.
        t.write("vadapt/be/cpuset.cpus", "6,7\n");
        assert!(!g.set_cpus(ThreadGroup::Be, &[7, 6]).unwrap());
        t.write("vadapt/be/cpuset.cpus", "six\n");
        assert!(matches!(
            g.set_cpus(ThreadGroup::Be, &[6]),
            Err(CpusetError::Parse { .. })
        ));
    }

    #[test]
    fn refuses_parents_that_offer_no_cpusets() {
        let (t, info) = v2_tree();
        t.write("vadapt/cgroup.controllers", "cpu io\n");
        let e = CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap_err();
        assert!(matches!(e, CpusetError::NoCpusetController { .. }), "{e}");
        assert!(!t.0.join("vadapt/vcpu").exists());

        let e = CpusetGroups::open(&t.0.join("absent"), &info).unwrap_err();
        assert!(matches!(e, CpusetError::NoParent { .. }), "{e}");
        let e = CpusetGroups::open(Path::new("/tmp/elsewhere"), &info).unwrap_err();
        assert!(matches!(e, CpusetError::NotCgroup { .. }), "{e}");

        let (t, _) = v1_tree();
        let cpu_only = mountinfo(&t.0, "cgroup", "rw,cpu,cpuacct");
        let e = CpusetGroups::open(&t.0.join("vadapt"), &cpu_only).unwrap_err();
        assert!(matches!(e, CpusetError::NotCpusetHierarchy { .. }), "{e}");

        let (t, info) = v1_tree();
        t.write("vadapt/cpuset.cpus", "\n");
        let e = CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap_err();
        assert!(matches!(e, CpusetError::NoCpus { .. }), "{e}");

        let (t, info) = v1_tree();
        t.write("vadapt/cpuset.mems", "\n");
        let e = CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap_err();
        assert!(matches!(e, CpusetError::NoMems { .. }), "{e}");
    }

    #[test]
    fn write_failures_are_classified() {
        let (t, info) = v1_tree();
        let g = CpusetGroups::open(&t.0.join("vadapt"), &info).unwrap();
        // A group directory that vanished: the write fails, typed.
        std::fs::remove_dir_all(t.0.join("vadapt/nq")).unwrap();
        let e = g.move_thread(ThreadGroup::Nq, 77).unwrap_err();
        assert!(matches!(e, CpusetError::Write { .. }) && !e.is_gone() && !e.is_refused());

        let write_error = |errno| CpusetError::Write {
            path: PathBuf::from("tasks"),
            value: "77".into(),
            source: io::Error::from_raw_os_error(errno),
        };
        assert!(write_error(libc::ESRCH).is_gone());
        for errno in [
            libc::EPERM,
            libc::EACCES,
            libc::EOPNOTSUPP,
            libc::ENOSPC,
            libc::EINVAL,
        ] {
            let e = write_error(errno);
            assert!(e.is_refused() && !e.is_gone(), "{e:?}");
        }
    }

    /// A real cgroup v1 cpuset: creates `<mount>/vadapt-test-<pid>`, moves
    /// a thread of this process in and back out, and removes it. Needs root
    /// and a v1 cpuset mount; ignored by default because it changes the
    /// host's cgroup tree (`cargo test -p vadapt-host -- --ignored real_cgroup`).
    #[test]
    #[ignore = "writes to the host's cgroup v1 cpuset hierarchy"]
    fn real_cgroup_v1_cpuset() {
        use crate::affinity::cpus_allowed_list;
        use crate::cgroup_mount::find_cpuset_mount;
        use crate::cputime::current_tid;
        use crate::thread_group::TaskId;

        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = find_cpuset_mount(&info).expect("a cpuset mount");
        assert!(mount.is_v1_cpuset(), "{mount:?}");
        let root = mount.mount_point;
        let parent = root.join(format!("vadapt-test-{}", std::process::id()));
        /// Removes the test's cgroups even if an assertion fails.
        struct Cleanup(PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                for g in ThreadGroup::ALL {
                    let _ = std::fs::remove_dir(self.0.join(g.name()));
                }
                let _ = std::fs::remove_dir(&self.0);
            }
        }
        std::fs::create_dir(&parent).unwrap();
        let _cleanup = Cleanup(parent.clone());
        let cpus = parse_cpu_list(&read(root.join("cpuset.effective_cpus")).unwrap()).unwrap();
        let mems = read(root.join("cpuset.effective_mems")).unwrap();
        write(parent.join("cpuset.cpus"), format_cpu_list(&cpus)).unwrap();
        write(parent.join("cpuset.mems"), mems).unwrap();

        let g = CpusetGroups::open(&parent, &info).unwrap();
        let cpu = *cpus.last().unwrap();
        assert!(g.set_cpus(ThreadGroup::Nq, &[cpu]).unwrap());
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(current_tid()).unwrap();
            let _ = stop_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        g.move_thread(ThreadGroup::Nq, tid).unwrap();
        let task = TaskId {
            pid: std::process::id(),
            tid,
            start: 0,
        };
        let allowed = cpus_allowed_list(Path::new("/proc"), task).unwrap();
        let members = read(g.dir(ThreadGroup::Nq).join("tasks")).unwrap();
        // A group whose cpuset.cpus is empty takes no threads (v1: ENOSPC).
        let refused = g.move_thread(ThreadGroup::Be, tid);
        // Back to the root cpuset before any assertion can fail.
        write(root.join("tasks"), tid.to_string()).unwrap();
        assert_eq!(allowed, [cpu]);
        assert_eq!(members, tid.to_string());
        let e = refused.unwrap_err();
        assert!(e.is_refused(), "{e:?}");

        // An exited thread: ESRCH.
        drop(stop_tx);
        worker.join().unwrap();
        let start = std::time::Instant::now();
        let e = loop {
            match g.move_thread(ThreadGroup::Nq, tid) {
                Err(e) => break e,
                Ok(()) => {
                    // Not released yet: out again, and retry.
                    write(root.join("tasks"), tid.to_string()).ok();
                    assert!(start.elapsed() < std::time::Duration::from_secs(5));
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        };
        assert!(e.is_gone(), "{e:?}");
    }
}
