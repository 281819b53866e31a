//! Background processes seen from the host: their records read through the confined file API
//! and their process groups signalled from here, so listing, reading and signalling them start
//! nothing in the sandbox. A sandbox at its pid limit (a fork bomb, or just many processes)
//! can still be listed and have its processes killed, and a record the sandbox tampered with
//! (a FIFO planted as `chunk`, a folder named with tabs) is refused here, field by field,
//! instead of blocking a script in the sandbox for its whole timeout.
//!
//! The record's layout is the one `ports::provider::processes` describes; what the fields mean
//! (and what makes one well formed) is decided there, by `RawRecord::check` and
//! `output_extent`. Every read is bounded and non-blocking, opens only regular files and never
//! follows a symlink at the last step; the process ids the records name are the sandbox's own
//! (its pid namespace), so they are matched against the container's processes as the host sees
//! them (its cgroup, each one's `NSpid` and `NSpgid`), and only those are signalled.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;

use rustix::fs::{fstat, openat, statat, AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

use super::bundle::HOME;
use super::cgroup::ContainerCgroup;
use super::files::{errno, file_type, invalid, SandboxFs};
use threadbox_core::ports::processes::{
    check_output_offset, chunk_name, chunk_number, damaged_record, output_extent, tag_bytes,
    tag_name, RawRecord, MAX_LISTED_PROCESSES, MAX_OUTPUT_CHUNKS, MAX_OUTPUT_READ,
};
use threadbox_core::ports::{
    valid_process_id, ProcessInfo, ProcessOutput, ProcessSignal, ProviderError,
};

/// Entries of a folder looked at, at most: the sandbox may fill one with any number of files.
const MAX_SCANNED: usize = 4096;
/// The most bytes read of one of a record's small files (a number, a terminal's path).
const SMALL: u64 = 64;
/// The most bytes of a command's text read (300 characters of UTF-8).
const COMMAND: u64 = 1200;

fn base() -> String {
    format!("{HOME}/.threadbox/processes")
}

/// One entry of a scanned folder: its name, kind and size (not following a symlink).
struct Entry {
    name: String,
    kind: FileType,
    size: u64,
}

impl SandboxFs {
    /// The folder at `path` (never a symlink), at most [`MAX_SCANNED`] of its entries whose
    /// names are UTF-8; `None` if there is no such folder.
    fn scan(&self, path: &str) -> Result<Option<Vec<Entry>>, ProviderError> {
        // A path that does not resolve (a folder on the way missing, or made a dangling
        // symlink by the sandbox) holds no record.
        let Ok(r) = self.resolve(path, false, false) else {
            return Ok(None);
        };
        let Some(stat) = r.stat.as_ref() else {
            return Ok(None);
        };
        if file_type(stat) != FileType::Directory {
            return Ok(None);
        }
        let dir = openat(
            &r.dir,
            r.name.as_deref().unwrap_or("."),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno(path, e))?;
        let mut out = Vec::new();
        for entry in Dir::read_from(&dir)
            .map_err(|e| errno(path, e))?
            .take(MAX_SCANNED + 2)
        {
            let entry = entry.map_err(|e| errno(path, e))?;
            let raw = entry.file_name();
            if matches!(raw.to_bytes(), b"." | b"..") {
                continue;
            }
            let Ok(name) = raw.to_str() else { continue };
            match statat(&dir, raw, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => out.push(Entry {
                    name: name.to_owned(),
                    kind: file_type(&stat),
                    size: u64::try_from(stat.st_size).unwrap_or(0),
                }),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(errno(path, e)),
            }
        }
        Ok(Some(out))
    }

    /// Up to `max` bytes of the regular file at `path` from `offset`: opened without following
    /// a symlink, non-blocking (a FIFO swapped in cannot hang us), and refused unless it is a
    /// regular file once open. `None` if there is no such file.
    fn read_bounded(
        &self,
        path: &str,
        offset: u64,
        max: u64,
    ) -> Result<Option<Vec<u8>>, ProviderError> {
        let Ok(r) = self.resolve(path, false, false) else {
            return Ok(None);
        };
        let (Some(name), Some(_)) = (r.name.as_deref(), r.stat.as_ref()) else {
            return Ok(None);
        };
        let fd: OwnedFd = match openat(
            &r.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(errno(path, e)),
        };
        let stat = fstat(&fd).map_err(|e| errno(path, e))?;
        if file_type(&stat) != FileType::RegularFile {
            return Err(invalid(format!("{path} is not a regular file")));
        }
        let mut file = File::from(fd);
        if offset > 0 {
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| super::files::io_error(path, e))?;
        }
        let mut out = Vec::new();
        file.take(max)
            .read_to_end(&mut out)
            .map_err(|e| super::files::io_error(path, e))?;
        Ok(Some(out))
    }
}

/// The container's processes as the host sees them: host pid, and pid and process group in the
/// container's own pid namespace. Its init is left out (it is never ours to signal).
#[derive(Clone, Debug, Default)]
pub(super) struct ContainerProcs {
    procs: Vec<ContainerProc>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ContainerProc {
    host_pid: i32,
    pid: i32,
    pgid: i32,
}

impl ContainerProcs {
    /// A snapshot of the processes in the container's cgroup that are in its pid namespace.
    pub fn of(cgroup: &ContainerCgroup, namespace: &str) -> Result<Self, ProviderError> {
        let pids = cgroup.procs().map_err(|e| {
            ProviderError::Internal(format!("cannot list the container's processes: {e}"))
        })?;
        let procs = pids
            .into_iter()
            .filter(|&pid| pid != cgroup.init_pid)
            .filter_map(|pid| in_namespace(pid, namespace))
            .collect();
        Ok(Self { procs })
    }

    fn alive(&self, pid: i32) -> bool {
        self.procs.iter().any(|p| p.pid == pid)
    }

    /// Send `signal` to every process of the container in process group `pgid` (its
    /// namespace's numbering). Each is opened as a pidfd and checked again through it, so a pid
    /// that was reused meanwhile is never signalled. How many were signalled.
    pub fn signal_group(&self, pgid: i32, signal: ProcessSignal, namespace: &str) -> usize {
        let signal = host_signal(signal);
        let mut sent = 0;
        for p in self.procs.iter().filter(|p| p.pgid == pgid) {
            let Some(host) = Pid::from_raw(p.host_pid) else {
                continue;
            };
            let Ok(pidfd) = pidfd_open(host, PidfdFlags::empty()) else {
                continue;
            };
            // The pidfd pins this process: if /proc still shows it in the same group and
            // namespace now, the pid was not reused between the snapshot and here.
            if in_namespace(p.host_pid, namespace) != Some(*p) {
                continue;
            }
            if pidfd_send_signal(&pidfd, signal).is_ok() {
                sent += 1;
            }
        }
        sent
    }
}

/// The pid namespace of host pid `pid`, as `/proc/<pid>/ns/pid` names it.
fn pid_namespace(pid: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Host pid `pid` as its container sees it, if it is in pid namespace `namespace`.
fn in_namespace(pid: i32, namespace: &str) -> Option<ContainerProc> {
    if pid_namespace(pid)? != namespace {
        return None;
    }
    let mut status = String::new();
    File::open(format!("/proc/{pid}/status"))
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut status)
        .ok()?;
    let innermost = |key: &str| -> Option<i32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .last()?
            .parse()
            .ok()
    };
    Some(ContainerProc {
        host_pid: pid,
        pid: innermost("NSpid:")?,
        pgid: innermost("NSpgid:")?,
    })
}

/// A record read from the sandbox, with where its output is.
struct Record {
    info: ProcessInfo,
    chunk: u64,
}

/// The record of process `id`: `Ok(None)` if there is none, a damaged-record conflict if it is
/// not well formed.
fn describe(
    fs: &SandboxFs,
    procs: &ContainerProcs,
    id: &str,
) -> Result<Option<Record>, ProviderError> {
    let dir = format!("{}/{id}", base());
    let Some(entries) = fs.scan(&dir)? else {
        return Ok(None);
    };
    let has = |name: &str| entries.iter().any(|e| e.name == name);
    let value = |name: &str, max: u64| -> Result<String, ProviderError> {
        match fs.read_bounded(&format!("{dir}/{name}"), 0, max) {
            Ok(bytes) => Ok(bytes
                .map(|b| {
                    let text = String::from_utf8_lossy(&b).into_owned();
                    if max == SMALL {
                        text.lines().next().unwrap_or_default().to_owned()
                    } else {
                        text
                    }
                })
                .unwrap_or_default()),
            Err(_) => Err(damaged_record(id, &format!("{name} is not a regular file"))),
        }
    };
    let chunk: u64 = value("chunk", SMALL)?
        .trim()
        .parse()
        .map_err(|_| damaged_record(id, "its chunk size is not a number"))?;
    let chunks: Vec<(u64, u64)> = entries
        .iter()
        .filter(|e| e.kind == FileType::RegularFile)
        .filter_map(|e| Some((chunk_number(&e.name)?, e.size)))
        .collect();
    let numbers: Vec<u64> = chunks.iter().map(|c| c.0).collect();
    let last_size = chunks.iter().max_by_key(|c| c.0).map_or(0, |c| c.1);
    let (bytes, start) = output_extent(chunk, &numbers, last_size)
        .ok_or_else(|| damaged_record(id, "its output does not add up"))?;
    let started = value("started_at", SMALL)?;
    let (state, code, ended) = if has("status") {
        ("exited", value("status", SMALL)?, value("ended_at", SMALL)?)
    } else {
        let supervisor = value("supervisor", SMALL)?;
        let alive = supervisor
            .trim()
            .parse::<i32>()
            .is_ok_and(|pid| pid > 0 && procs.alive(pid));
        (
            if alive { "running" } else { "lost" },
            String::new(),
            String::new(),
        )
    };
    let command = value("command", COMMAND)?;
    let (bytes, start) = (bytes.to_string(), start.to_string());
    let info = RawRecord {
        id,
        state,
        code: &code,
        started: &started,
        ended: &ended,
        pty: has("tty") || has("pty"),
        output_bytes: &bytes,
        output_start: &start,
        command: &command,
    }
    .check()
    .ok_or_else(|| damaged_record(id, "a field is not what threadbox writes"))?;
    Ok(Some(Record { info, chunk }))
}

fn no_such_process(id: &str) -> ProviderError {
    // The same words as the scripts': the use cases answer them with a 404.
    ProviderError::InvalidRequest(format!("no such process: {id}"))
}

fn checked_id(id: &str) -> Result<(), ProviderError> {
    if valid_process_id(id) {
        Ok(())
    } else {
        Err(ProviderError::InvalidRequest(format!(
            "{id:?} is not a process id"
        )))
    }
}

/// Every record that looks like one (a folder named like a process id), each described or
/// `None` when it is damaged: the caller keeps the well-formed ones.
pub(super) fn list(
    fs: &SandboxFs,
    procs: &ContainerProcs,
) -> Result<Vec<Option<ProcessInfo>>, ProviderError> {
    let Some(entries) = fs.scan(&base())? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries
        .iter()
        .filter(|e| e.kind == FileType::Directory && valid_process_id(&e.name))
        .take(MAX_LISTED_PROCESSES)
    {
        match describe(fs, procs, &entry.name) {
            Ok(Some(record)) => out.push(Some(record.info)),
            Ok(None) => {}
            Err(_) => out.push(None),
        }
    }
    Ok(out)
}

/// Up to `max` bytes of process `id`'s output from `after` (or from where the ring starts).
pub(super) fn read_output(
    fs: &SandboxFs,
    procs: &ContainerProcs,
    id: &str,
    after: u64,
    max: u64,
) -> Result<ProcessOutput, ProviderError> {
    checked_id(id)?;
    let after = check_output_offset(after)?;
    let max = max.clamp(1, MAX_OUTPUT_READ);
    let record = describe(fs, procs, id)?.ok_or_else(|| no_such_process(id))?;
    let (bytes, start) = (record.info.output_bytes, record.info.output_start);
    let pos = after.max(start);
    if pos >= bytes {
        return Ok(ProcessOutput {
            offset: pos.min(bytes),
            data: Vec::new(),
            stderr: Vec::new(),
            info: record.info,
        });
    }
    let want = max.min(bytes - pos);
    let mut data = Vec::new();
    let mut tags = Vec::new();
    let (mut k, mut off) = (pos / record.chunk, pos % record.chunk);
    // A read spans a handful of chunks; a record claiming tiny ones cannot make it open more.
    for _ in 0..=MAX_OUTPUT_CHUNKS {
        if data.len() as u64 >= want {
            break;
        }
        let path = format!("{}/{id}/{}", base(), chunk_name(k));
        let left = want - data.len() as u64;
        // A chunk that left the ring meanwhile (or was never there) ends what can be read.
        let piece = match fs.read_bounded(&path, off, left.min(record.chunk - off)) {
            Ok(Some(piece)) if !piece.is_empty() => piece,
            Ok(_) => break,
            Err(_) => return Err(damaged_record(id, "an output chunk is not a regular file")),
        };
        // Its tags (chunks are a multiple of 8 bytes, so they join): read after the bytes,
        // which the writer tags before writing them; missing ones are stdout.
        let tag_from = off / 8;
        let tag_len = tag_bytes(off, piece.len() as u64);
        let tag_path = format!("{}/{id}/{}", base(), tag_name(k));
        let mut piece_tags = match fs.read_bounded(&tag_path, tag_from, tag_len) {
            Ok(found) => found.unwrap_or_default(),
            Err(_) => return Err(damaged_record(id, "a tag file is not a regular file")),
        };
        piece_tags.resize(tag_len as usize, 0);
        // Consecutive pieces meet on a chunk boundary, a whole bitmap byte.
        tags.extend_from_slice(&piece_tags);
        data.extend_from_slice(&piece);
        k += 1;
        off = 0;
    }
    Ok(ProcessOutput::tagged(pos, data, &tags, record.info))
}

/// The process group a signal to process `id` goes to (its namespace's numbering); `None` when
/// the process has ended, which ignores signals.
pub(super) fn signal_target(fs: &SandboxFs, id: &str) -> Result<Option<i32>, ProviderError> {
    checked_id(id)?;
    let dir = format!("{}/{id}", base());
    let Some(entries) = fs.scan(&dir)? else {
        return Err(no_such_process(id));
    };
    if entries.iter().any(|e| e.name == "status") {
        return Ok(None);
    }
    let pgid = match fs.read_bounded(&format!("{dir}/pgid"), 0, SMALL) {
        Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).trim().parse::<i32>().ok(),
        Ok(None) => None,
        Err(_) => return Err(damaged_record(id, "pgid is not a regular file")),
    };
    // Process group 1 would be the container's init: never a background process's.
    let Some(pgid) = pgid.filter(|g| *g > 1) else {
        return Err(ProviderError::Conflict(
            "the process has not started yet".into(),
        ));
    };
    Ok(Some(pgid))
}

fn host_signal(signal: ProcessSignal) -> Signal {
    match signal {
        ProcessSignal::Term => Signal::TERM,
        ProcessSignal::Kill => Signal::KILL,
        ProcessSignal::Int => Signal::INT,
        ProcessSignal::Hup => Signal::HUP,
        ProcessSignal::Stop => Signal::STOP,
        ProcessSignal::Cont => Signal::CONT,
    }
}

/// The pid namespace of the container whose init is `init_pid`; `None` when it is not running.
pub(super) fn namespace_of(init_pid: i32) -> Option<String> {
    pid_namespace(init_pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::fs_over;

    fn record(home: &std::path::Path, id: &str) -> std::path::PathBuf {
        let d = home.join(".threadbox/processes").join(id);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("chunk"), "8").unwrap();
        std::fs::write(d.join("started_at"), "1000\n").unwrap();
        std::fs::write(d.join("command"), "echo\thi\nthere").unwrap();
        std::fs::write(d.join("status"), "0\n").unwrap();
        std::fs::write(d.join("ended_at"), "2000\n").unwrap();
        std::fs::write(d.join("out.000000001"), "efghijkl").unwrap();
        std::fs::write(d.join("out.000000002"), "mn").unwrap();
        d
    }

    #[test]
    fn records_are_read_from_the_host_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_over(dir.path());
        let home = dir.path().join("home");
        record(&home, "abc1");
        let procs = ContainerProcs::default();
        let all = list(&fs, &procs).unwrap();
        let info = all[0].clone().unwrap();
        assert_eq!(info.id, "abc1");
        assert_eq!(info.exit_code, Some(0));
        assert_eq!((info.output_start, info.output_bytes), (8, 18));
        assert_eq!(info.command, "echo hi there");

        // Reads span chunks, start where the ring does, and stop at its end.
        let read = read_output(&fs, &procs, "abc1", 0, 100).unwrap();
        assert_eq!((read.offset, read.data.as_slice()), (8, &b"efghijklmn"[..]));
        assert!(read.stderr.is_empty());
        let read = read_output(&fs, &procs, "abc1", 10, 3).unwrap();
        assert_eq!((read.offset, read.data.as_slice()), (10, &b"ghi"[..]));
        let read = read_output(&fs, &procs, "abc1", 50, 3).unwrap();
        assert_eq!((read.offset, read.data.len()), (18, 0));
        // Tagged: bytes 10 and 11 ("gh") and 16 ("m") came from stderr.
        let d = home.join(".threadbox/processes/abc1");
        std::fs::write(d.join("err.000000001"), [0b0000_1100]).unwrap();
        std::fs::write(d.join("err.000000002"), [0b0000_0001]).unwrap();
        let read = read_output(&fs, &procs, "abc1", 0, 100).unwrap();
        assert_eq!(read.stderr, [10..12, 16..17]);
        let read = read_output(&fs, &procs, "abc1", 11, 6).unwrap();
        assert_eq!((read.offset, read.data.as_slice()), (11, &b"hijklm"[..]));
        assert_eq!(read.stderr, [11..12, 16..17]);
        assert!(matches!(
            read_output(&fs, &procs, "abc1", u64::MAX, 3),
            Err(ProviderError::InvalidRequest(_))
        ));
        assert!(matches!(
            read_output(&fs, &procs, "nosuch", 0, 3),
            Err(ProviderError::InvalidRequest(m)) if m.starts_with("no such process")
        ));
    }

    #[test]
    fn a_planted_fifo_or_forged_folder_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_over(dir.path());
        let home = dir.path().join("home");
        record(&home, "good");
        let bad = record(&home, "fifo");
        let mkfifo = |path: std::path::PathBuf| {
            std::fs::remove_file(&path).unwrap();
            let made = std::process::Command::new("mkfifo").arg(&path).status();
            assert!(made.unwrap().success());
        };
        mkfifo(bad.join("chunk"));
        let out = record(&home, "fifoout");
        mkfifo(out.join("out.000000002"));
        // A folder whose name would forge a whole line in a tab-separated listing.
        record(&home, "x\trunning\t\t1\t\t0\t0\t0\tforged");
        let procs = ContainerProcs::default();
        let all = list(&fs, &procs).unwrap();
        let ids: Vec<String> = all.iter().flatten().map(|p| p.id.clone()).collect();
        // The FIFO chunk's record is damaged; a FIFO in place of an output chunk is no chunk.
        assert_eq!(all.iter().filter(|r| r.is_none()).count(), 1, "{all:?}");
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ["fifoout", "good"]);
        assert!(matches!(
            read_output(&fs, &procs, "fifo", 0, 10),
            Err(ProviderError::Conflict(m)) if m.contains("damaged")
        ));
    }
}
