//! Where a container lives on the host: its init pid, its memory cgroup and its freezer.
//!
//! runc nests each container's cgroups under the cgroups of the process that created it, so the
//! path depends on who ran `runc run`; we read it back from the init process instead of
//! guessing. Works on cgroup v1, v2 and hybrid hosts (where memory is on v1).

use std::fs;
use std::io;
use std::path::PathBuf;

/// A running container's host-side handles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerCgroup {
    /// The container's pid 1, as the host sees it.
    pub init_pid: i32,
    /// The container's memory cgroup directory (v1 memory controller, or its v2 cgroup).
    pub dir: PathBuf,
    version: Version,
    /// The init's `/proc/<pid>/cgroup` line we found `dir` from, to tell a reused pid apart.
    membership: String,
    /// The container's freezer: v1's freezer controller directory, or its v2 cgroup (where
    /// `cgroup.freeze` is); `None` where neither is found (runc's pause is used then).
    freezer: Option<(Version, PathBuf)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

impl ContainerCgroup {
    /// Find the memory cgroup of the process `init_pid`.
    pub fn of_init(init_pid: i32) -> io::Result<Self> {
        let membership = memory_membership(init_pid)?;
        let mounts = CgroupMounts::read()?;
        let (version, rel) = parse_membership(&membership)
            .ok_or_else(|| io::Error::other(format!("unexpected cgroup line {membership:?}")))?;
        let mount = match version {
            Version::V1 => mounts.v1_memory.as_ref(),
            Version::V2 => mounts.v2.as_ref(),
        }
        .ok_or_else(|| io::Error::other("no cgroup filesystem with the memory controller"))?;
        let rel = rel.strip_prefix(mount.root.as_str()).unwrap_or(rel);
        let dir = mount.point.join(rel.trim_start_matches('/'));
        let freezer = freezer_of(init_pid, &mounts);
        Ok(Self {
            init_pid,
            dir,
            version,
            membership,
            freezer,
        })
    }

    /// Whether the container is frozen, from its freezer (`None`: no freezer found, or it
    /// cannot be read).
    pub fn is_frozen(&self) -> Option<bool> {
        let (version, dir) = self.freezer.as_ref()?;
        match version {
            Version::V1 => {
                let state = fs::read_to_string(dir.join("freezer.state")).ok()?;
                Some(state.trim() != "THAWED")
            }
            Version::V2 => {
                let events = fs::read_to_string(dir.join("cgroup.events")).ok()?;
                Some(events.lines().any(|l| l.trim() == "frozen 1"))
            }
        }
    }

    /// Freeze or thaw the container through its freezer, as `runc pause` and `runc resume` do,
    /// without starting runc: written, then read back until the kernel says it is done (a
    /// freeze of a cgroup whose tasks are mid-fork takes a few rounds), at most `within`.
    pub fn set_frozen(&self, frozen: bool, within: std::time::Duration) -> io::Result<()> {
        let Some((version, dir)) = self.freezer.as_ref() else {
            return Err(io::Error::other("no freezer for this container"));
        };
        let (file, value) = match (version, frozen) {
            (Version::V1, true) => ("freezer.state", "FROZEN"),
            (Version::V1, false) => ("freezer.state", "THAWED"),
            (Version::V2, true) => ("cgroup.freeze", "1"),
            (Version::V2, false) => ("cgroup.freeze", "0"),
        };
        let deadline = std::time::Instant::now() + within;
        loop {
            fs::write(dir.join(file), value)?;
            let done = match version {
                Version::V1 => fs::read_to_string(dir.join("freezer.state"))?.trim() == value,
                Version::V2 => self.is_frozen() == Some(frozen),
            };
            if done {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the container's freezer did not reach {value}"),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Is `init_pid` still the init we found (not exited, its pid not reused)?
    pub fn is_current(&self) -> bool {
        memory_membership(self.init_pid).is_ok_and(|line| line == self.membership)
    }

    /// How many times the kernel's OOM killer has fired in this cgroup (`oom_kill` of v1's
    /// memory.oom_control, v2's memory.events). `None` if the kernel does not say.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }

    /// The memory the container's cgroup is charged for now, page cache included: v1's
    /// `memory.usage_in_bytes`, v2's `memory.current`.
    pub fn memory_bytes(&self) -> io::Result<u64> {
        let file = match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        fs::read_to_string(self.dir.join(file))?
            .trim()
            .parse()
            .map_err(|e| io::Error::other(format!("{file}: {e}")))
    }

    /// Host pids of every process in the container.
    pub fn procs(&self) -> io::Result<Vec<i32>> {
        Ok(fs::read_to_string(self.dir.join("cgroup.procs"))?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// Tasks (threads) alive in the container: what its pid limit counts.
    pub fn tasks(&self) -> io::Result<usize> {
        Ok(self
            .procs()?
            .into_iter()
            .filter_map(|pid| {
                let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Threads:"))?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .sum())
    }

    /// The container's `/tmp`, reached through its init's root.
    pub fn tmp_dir(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/tmp", self.init_pid))
    }
}

/// Can a memory limit also cap swap here? runc fails to start a container whose spec sets a
/// swap limit the kernel does not account for, so we only set one when it will work.
pub(crate) fn swap_limit_supported() -> bool {
    let Ok(mounts) = CgroupMounts::read() else {
        return false;
    };
    if let Some(v1) = mounts.v1_memory {
        return v1.point.join("memory.memsw.limit_in_bytes").exists();
    }
    // On v2 the file exists in every non-root cgroup when swap accounting is on; look at ours.
    if let (Some(v2), Ok(line)) = (mounts.v2, memory_membership(std::process::id() as i32)) {
        if let Some((Version::V2, rel)) = parse_membership(&line) {
            let rel = rel.strip_prefix(v2.root.as_str()).unwrap_or(rel);
            return v2
                .point
                .join(rel.trim_start_matches('/'))
                .join("memory.swap.max")
                .exists();
        }
    }
    false
}

/// The line of `/proc/<pid>/cgroup` that places the process in the memory hierarchy: the v1
/// memory controller's line if there is one, else the v2 (`0::`) line.
fn memory_membership(pid: i32) -> io::Result<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let v1 = text.lines().find(|l| {
        l.split(':')
            .nth(1)
            .is_some_and(|ctrls| ctrls.split(',').any(|c| c == "memory"))
    });
    v1.or_else(|| text.lines().find(|l| l.starts_with("0::")))
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("process {pid} has no memory cgroup")))
}

/// The container's freezer directory: the v1 freezer controller's, else its v2 cgroup.
fn freezer_of(pid: i32, mounts: &CgroupMounts) -> Option<(Version, PathBuf)> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v1 = text.lines().find(|l| {
        l.split(':')
            .nth(1)
            .is_some_and(|ctrls| ctrls.split(',').any(|c| c == "freezer"))
    });
    let (line, mount) = match (v1, &mounts.v1_freezer, &mounts.v2) {
        (Some(line), Some(mount), _) => (line, mount),
        (None, _, Some(mount)) => (text.lines().find(|l| l.starts_with("0::"))?, mount),
        _ => return None,
    };
    let (version, rel) = parse_membership(line)?;
    let rel = rel.strip_prefix(mount.root.as_str()).unwrap_or(rel);
    Some((version, mount.point.join(rel.trim_start_matches('/'))))
}

fn parse_membership(line: &str) -> Option<(Version, &str)> {
    let mut parts = line.splitn(3, ':');
    let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
    if id == "0" && ctrls.is_empty() {
        Some((Version::V2, path))
    } else {
        Some((Version::V1, path))
    }
}

struct Mount {
    /// The cgroup path that is mounted (`/` unless we are in a cgroup namespace).
    root: String,
    point: PathBuf,
}

struct CgroupMounts {
    v1_memory: Option<Mount>,
    v1_freezer: Option<Mount>,
    v2: Option<Mount>,
}

impl CgroupMounts {
    fn read() -> io::Result<Self> {
        Ok(Self::parse(&fs::read_to_string("/proc/self/mountinfo")?))
    }

    /// mountinfo lines: `id parent major:minor root mountpoint options... - fstype source superopts`.
    fn parse(mountinfo: &str) -> Self {
        let mut mounts = CgroupMounts {
            v1_memory: None,
            v1_freezer: None,
            v2: None,
        };
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(point), Some(fstype)) = (left.get(3), left.get(4), right.first())
            else {
                continue;
            };
            let mount = || Mount {
                root: unescape(root),
                point: PathBuf::from(unescape(point)),
            };
            match *fstype {
                "cgroup"
                    if right
                        .get(2)
                        .is_some_and(|opts| opts.split(',').any(|o| o == "memory")) =>
                {
                    mounts.v1_memory.get_or_insert_with(mount);
                }
                "cgroup"
                    if right
                        .get(2)
                        .is_some_and(|opts| opts.split(',').any(|o| o == "freezer")) =>
                {
                    mounts.v1_freezer.get_or_insert_with(mount);
                }
                "cgroup2" => {
                    mounts.v2.get_or_insert_with(mount);
                }
                _ => {}
            }
        }
        mounts
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 1 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
30 25 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
31 25 0:29 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
32 25 0:30 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
33 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn mounts_are_found() {
        let m = CgroupMounts::parse(HYBRID);
        assert_eq!(
            m.v1_memory.unwrap().point,
            PathBuf::from("/sys/fs/cgroup/memory")
        );
        assert_eq!(
            m.v1_freezer.unwrap().point,
            PathBuf::from("/sys/fs/cgroup/freezer")
        );
        assert_eq!(m.v2.unwrap().point, PathBuf::from("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn memberships_parse() {
        assert_eq!(
            parse_membership("4:memory:/process_api/x/rc-1"),
            Some((Version::V1, "/process_api/x/rc-1"))
        );
        assert_eq!(
            parse_membership("0::/user.slice/rc-1"),
            Some((Version::V2, "/user.slice/rc-1"))
        );
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
    }
}
