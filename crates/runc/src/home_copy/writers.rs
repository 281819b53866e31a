//! Files a process may change without moving their ctime: the two-pass copy (`live`) trusts
//! a file's ctime to tell whether it changed since the first pass read it, and two kinds of
//! write escape that:
//!
//! - a store through a shared writable mapping that is already writable and dirty: the kernel
//!   moves the times on the write fault that makes a page writable, not on later stores to it;
//! - a `write` that began before the first pass (it moves the times when it starts) and is
//!   still copying its bytes while the first pass reads the file.
//!
//! So the first pass notes every file mapped shared and writable, and every file open for
//! writing, by the sandbox's processes (its cgroup's, as root; rootless, every process of this
//! user, which the sandbox's are), and the frozen pass notes the mappings again; those files are
//! copied again frozen whatever their times say. The scan is bounded: past [`MAX_MAPS_BYTES`]
//! of mappings or [`MAX_DESCRIPTORS`] descriptors, or when a process's own can't be read, it
//! answers `None` and the caller trusts no file's times at all.

use std::collections::HashSet;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;

/// The most of `/proc/*/maps` one scan reads.
const MAX_MAPS_BYTES: u64 = 64 << 20;
/// The most descriptors one scan looks at.
const MAX_DESCRIPTORS: usize = 1 << 20;

/// What to look for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scan {
    /// Shared writable mappings only (the sandbox is frozen: no `write` is under way).
    Mappings,
    /// Mappings, and descriptors open for writing on the device `dev`.
    MappingsAndWriters { dev: u64 },
}

/// The inode numbers of the files that processes map shared and writable (on any device: a
/// mapping's device is the filesystem's, which on btrfs is not what `stat` says, so the match
/// is by inode alone, which can only make more files copied again), and, when asked, of the
/// files on `dev` open for writing, by the processes `pids` (or every process this user may
/// read: all as root, else its own). `None` when one of them could not be read.
pub(crate) fn busy_files(scan: Scan, pids: Option<&[i32]>) -> Option<HashSet<u64>> {
    let me = rustix::process::geteuid();
    let mut busy = HashSet::new();
    let mut budget = Budget {
        maps_bytes: MAX_MAPS_BYTES,
        descriptors: MAX_DESCRIPTORS,
    };
    let dirs: Vec<std::path::PathBuf> = match pids {
        Some(pids) => pids
            .iter()
            .map(|pid| std::path::PathBuf::from(format!("/proc/{pid}")))
            .collect(),
        None => fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter(|e| {
                e.file_name()
                    .as_encoded_bytes()
                    .iter()
                    .all(u8::is_ascii_digit)
            })
            .map(|e| e.path())
            .collect(),
    };
    for dir in dirs {
        if pids.is_none() && !me.is_root() {
            // Another user's process: not the sandbox's, and not ours to read.
            match fs::metadata(&dir) {
                Ok(meta) if meta.uid() == me.as_raw() => {}
                _ => continue,
            }
        }
        let read = mappings(&dir, &mut busy, &mut budget).and_then(|()| match scan {
            Scan::Mappings => Ok(()),
            Scan::MappingsAndWriters { dev } => writers(&dir, dev, &mut busy, &mut budget),
        });
        match read {
            Ok(()) => {}
            // The process ended meanwhile.
            Err(e) if gone(&e) => {}
            Err(e) => {
                tracing::debug!(process = %dir.display(), error = %e,
                    "cannot read a process's files; trusting no file's times");
                return None;
            }
        }
    }
    Some(busy)
}

struct Budget {
    maps_bytes: u64,
    descriptors: usize,
}

fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

fn over(what: &str) -> io::Error {
    io::Error::other(format!("more {what} than a scan reads"))
}

/// The shared writable mappings in `<dir>/maps`: `start-end perms offset dev inode path`.
fn mappings(dir: &std::path::Path, busy: &mut HashSet<u64>, budget: &mut Budget) -> io::Result<()> {
    let file = fs::File::open(dir.join("maps"))?;
    let mut reader = BufReader::new(file.take(budget.maps_bytes + 1));
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        budget.maps_bytes = budget
            .maps_bytes
            .checked_sub(n as u64)
            .ok_or_else(|| over("mappings"))?;
        let mut fields = line.split_ascii_whitespace();
        let (Some(_), Some(perms), Some(_), Some(_), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let perms = perms.as_bytes();
        if perms.get(1) == Some(&b'w') && perms.get(3) == Some(&b's') {
            if let Ok(ino) = inode.parse::<u64>() {
                if ino != 0 {
                    busy.insert(ino);
                }
            }
        }
    }
}

/// The files on `dev` that `<dir>/fd` holds open for writing.
fn writers(
    dir: &std::path::Path,
    dev: u64,
    busy: &mut HashSet<u64>,
    budget: &mut Budget,
) -> io::Result<()> {
    for fd in fs::read_dir(dir.join("fd"))? {
        let fd = fd?;
        budget.descriptors = budget
            .descriptors
            .checked_sub(1)
            .ok_or_else(|| over("descriptors"))?;
        // `stat` through the descriptor's link: the open file itself, not a path.
        let Ok(meta) = fs::metadata(fd.path()) else {
            continue;
        };
        if !meta.is_file() || meta.dev() != dev {
            continue;
        }
        let info = dir.join("fdinfo").join(fd.file_name());
        let Ok(info) = fs::read_to_string(info) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok());
        match flags {
            Some(flags) if flags & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32 => {}
            // Writable, or unreadable flags: counted as written.
            _ => {
                busy.insert(meta.ino());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn files_open_for_writing_and_mapped_shared_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let (written, read, mapped) = (
            dir.path().join("w"),
            dir.path().join("r"),
            dir.path().join("m"),
        );
        for path in [&written, &read, &mapped] {
            fs::write(path, vec![1u8; 4096]).unwrap();
        }
        let meta = |p: &std::path::Path| fs::metadata(p).unwrap();
        let dev = meta(&written).dev();
        let _w = fs::OpenOptions::new().append(true).open(&written).unwrap();
        let _r = fs::File::open(&read).unwrap();
        let m = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&mapped)
            .unwrap();
        // SAFETY: a fresh shared mapping of a file we hold; unmapped below, never dereferenced.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                m.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        drop(m);

        let busy = busy_files(
            Scan::MappingsAndWriters { dev },
            Some(&[std::process::id() as i32]),
        )
        .expect("a scan");
        assert!(busy.contains(&meta(&written).ino()), "open for writing");
        assert!(
            busy.contains(&meta(&mapped).ino()),
            "mapped shared, writable"
        );
        assert!(!busy.contains(&meta(&read).ino()), "open to read only");
        let mapped_only =
            busy_files(Scan::Mappings, Some(&[std::process::id() as i32])).expect("a scan");
        assert!(mapped_only.contains(&meta(&mapped).ino()));
        // SAFETY: the mapping made above.
        assert_eq!(unsafe { libc::munmap(at, 4096) }, 0);
    }
}
