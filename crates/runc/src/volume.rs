//! A sandbox's `/home/user` as a filesystem of its own, so its size and file count are hard
//! limits: a sparse ext4 image in the bundle (`home.img`), attached to a loop device and mounted
//! on the bundle's `home/`. Writing past the limit gets ENOSPC inside the sandbox, through the
//! file API too, and the host's disk and every other sandbox are untouched. Removing it, whatever
//! the sandbox left in it, is one unmount and one unlink.
//!
//! Formatting an image takes 10 to 20 ms (mkfs.ext4), more than a create may spend on it, so a
//! [`VolumePool`] keeps a few images formatted ahead of time in `<state>/volumes/`. A create
//! renames one into its bundle and mounts it (a few milliseconds: two ioctls and a mount); the
//! pool is topped up in the background. With no spare at hand a create formats its own.
//!
//! Mounted with `nosuid,nodev` like the bind mount it replaces, and `noinit_itable`: mkfs leaves
//! the inode tables unwritten (lazy init) and the kernel would otherwise zero them in the
//! background, tens of MiB of writes per sandbox for nothing. The loop device is set to clear
//! itself when the filesystem is unmounted, so nothing is left attached after a removal.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use super::config::DiskQuota;
use super::programs::find_program;
use threadbox_core::ports::DiskUsage;

/// Formatted images waiting for a sandbox, all for one quota.
#[derive(Clone, Debug)]
pub(crate) struct VolumePool {
    dir: PathBuf,
    quota: DiskQuota,
    spares: usize,
    mkfs: PathBuf,
}

/// Spares are named for their quota, so a provider started with another quota never takes one
/// of the wrong size; a file being formatted has a name no take matches.
const SPARE_PREFIX: &str = "spare-";
const FORMATTING_PREFIX: &str = ".formatting-";

impl VolumePool {
    /// A pool in `dir` keeping `spares` images ready. Fails, saying what is missing, where this
    /// host cannot make or mount images at all, so that shows at start and not at a create.
    pub fn open(dir: PathBuf, quota: DiskQuota, spares: usize) -> Result<Self, String> {
        if quota.bytes < DiskQuota::MIN_BYTES || quota.inodes < DiskQuota::MIN_INODES {
            return Err(format!(
                "a disk quota needs at least {} MiB and {} files",
                DiskQuota::MIN_BYTES >> 20,
                DiskQuota::MIN_INODES
            ));
        }
        let mkfs = find_program("mkfs.ext4")
            .ok_or("mkfs.ext4 is not installed (apt-get install e2fsprogs)")?;
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/loop-control")
            .map_err(|e| format!("this host offers no loop devices (/dev/loop-control: {e})"))?;
        let is_ext4 = |line: &str| line.split_whitespace().last() == Some("ext4");
        let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
        if !filesystems.lines().any(is_ext4) {
            // Not loaded yet is fine: the first mount loads the module. Worth a line, not a stop.
            tracing::debug!("ext4 is not in /proc/filesystems yet");
        }
        let pool = Self {
            dir,
            quota,
            spares,
            mkfs,
        };
        // Spares for another quota, and images a run died formatting (a minute old at least:
        // another provider over this directory may be formatting one right now).
        if let Ok(entries) = fs::read_dir(&pool.dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let stale = if name.starts_with(FORMATTING_PREFIX) {
                    entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > std::time::Duration::from_secs(60))
                } else {
                    name.starts_with(SPARE_PREFIX) && !name.starts_with(&pool.spare_prefix())
                };
                if stale {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        Ok(pool)
    }

    fn spare_prefix(&self) -> String {
        format!(
            "{SPARE_PREFIX}{}b-{}i-",
            self.quota.bytes, self.quota.inodes
        )
    }

    fn spares_now(&self) -> Vec<PathBuf> {
        let prefix = self.spare_prefix();
        fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Format spares until the pool holds its number. Run in the background after each take.
    pub fn fill(&self) -> io::Result<()> {
        while self.spares_now().len() < self.spares {
            let unique = unique_suffix();
            let formatting = self.dir.join(format!("{FORMATTING_PREFIX}{unique}.img"));
            let result = self.format(&formatting).and_then(|()| {
                let spare = self
                    .dir
                    .join(format!("{}{unique}.img", self.spare_prefix()));
                fs::rename(&formatting, spare)
            });
            if let Err(e) = result {
                let _ = fs::remove_file(&formatting);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Put a formatted image at `image`: a spare if there is one, else a new one made here.
    pub fn take(&self, image: &Path) -> io::Result<()> {
        for spare in self.spares_now() {
            match fs::rename(&spare, image) {
                Ok(()) => return Ok(()),
                // Another provider over the same state directory took it first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        tracing::debug!("no spare home volume ready; formatting one for this create");
        self.format(image)
    }

    /// A sparse image of the quota's size with an ext4 filesystem of the quota's inode count.
    fn format(&self, image: &Path) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(image)?
            .set_len(self.quota.bytes)?;
        // -m 0: no blocks reserved for root, so the sandbox gets the whole size and the file
        // API, running as root on the host, cannot write past it either.
        let output = Command::new(&self.mkfs)
            .args(["-q", "-F", "-m", "0", "-N"])
            .arg(self.quota.inodes.to_string())
            .args([
                "-E",
                "lazy_itable_init=1,lazy_journal_init=1",
                "-L",
                "threadbox-home",
            ])
            .arg(image)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()?;
        if output.status.success() {
            Ok(())
        } else {
            let _ = fs::remove_file(image);
            Err(io::Error::other(format!(
                "mkfs.ext4 failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Mount `image` on `target` through a loop device that clears itself on unmount, and give the
/// filesystem's root to `owner` (the sandbox user's host ids). `lost+found` goes: inside it
/// would be a directory of root's the sandbox user can neither use nor remove.
pub(crate) fn mount(image: &Path, target: &Path, owner: (u32, u32)) -> io::Result<()> {
    let device = attach_loop(image)?;
    let source = CString::new(device.path.as_os_str().as_bytes())?;
    let target_c = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: valid NUL-terminated strings; ext4's options are a NUL-terminated string too.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target_c.as_ptr(),
            c"ext4".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"noinit_itable".as_ptr().cast(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        device.detach();
        return Err(io::Error::new(
            e.kind(),
            format!("mounting the home volume: {e}"),
        ));
    }
    // The mount holds the loop device now; our descriptor can go (autoclear waits for both).
    drop(device);
    std::os::unix::fs::chown(target, Some(owner.0), Some(owner.1))?;
    match fs::remove_dir(target.join("lost+found")) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(())
}

/// Mount a fresh tmpfs on `target` with `options` (nosuid, nodev), for a bundle's root
/// filesystem.
pub(crate) fn mount_tmpfs(target: &Path, options: &str) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())?;
    let options = CString::new(options)?;
    // SAFETY: valid NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("mounting the root tmpfs: {e}"),
        ))
    }
}

/// Unmount a home volume (or a root tmpfs), detached so nothing still open in it can keep it busy (the loop
/// device and the image's blocks go when the last user does). Not a mount point, or not there,
/// is fine: sandboxes from before volumes have a plain directory.
pub(crate) fn unmount(target: &Path) -> io::Result<()> {
    let path = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } != 0 {
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) {
            return Err(e);
        }
    }
    Ok(())
}

/// What a mounted volume holds against its limits.
pub(crate) fn usage(target: &Path) -> io::Result<DiskUsage> {
    let stat = rustix::fs::statvfs(target)?;
    let block = stat.f_frsize.max(1);
    Ok(DiskUsage {
        used_bytes: stat.f_blocks.saturating_sub(stat.f_bfree) * block,
        limit_bytes: stat.f_blocks * block,
        used_inodes: stat.f_files.saturating_sub(stat.f_ffree),
        limit_inodes: stat.f_files,
    })
}

/// An attached loop device, detached again on `detach` (before a mount takes it over).
struct LoopDevice {
    path: PathBuf,
    file: fs::File,
}

impl LoopDevice {
    fn detach(self) {
        // SAFETY: LOOP_CLR_FD takes no argument.
        unsafe { libc::ioctl(self.file.as_raw_fd(), LOOP_CLR_FD, 0) };
    }
}

// From <linux/loop.h>; the libc crate does not carry them.
const LOOP_CLR_FD: libc::Ioctl = 0x4C01;
const LOOP_CONFIGURE: libc::Ioctl = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::Ioctl = 0x4C82;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Attach `image` to a free loop device in one step (LOOP_CONFIGURE, Linux 5.8), set to clear
/// itself once unmounted. A device another process grabs between "free" and "configure"
/// answers EBUSY, and we ask for another.
fn attach_loop(image: &Path) -> io::Result<LoopDevice> {
    let control = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let backing = fs::OpenOptions::new().read(true).write(true).open(image)?;
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if number < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{number}"));
        let file = match fs::OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            // The device node may lag a moment behind its creation.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let config = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: LO_FLAGS_AUTOCLEAR,
                lo_file_name: [0; 64],
                lo_crypt_name: [0; 64],
                lo_encrypt_key: [0; 32],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: `config` is a live, correctly laid out `struct loop_config`.
        let rc = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                LOOP_CONFIGURE,
                &config as *const LoopConfig,
            )
        };
        if rc == 0 {
            return Ok(LoopDevice { path, file });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e);
        }
    }
    Err(io::Error::other(
        "no free loop device after 16 tries (every one taken as it was offered)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_structs_match_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }

    #[test]
    fn spares_are_named_for_their_quota() {
        let pool = VolumePool {
            dir: PathBuf::from("/nonexistent"),
            quota: DiskQuota {
                bytes: 1 << 30,
                inodes: 1000,
            },
            spares: 1,
            mkfs: PathBuf::from("mkfs.ext4"),
        };
        assert_eq!(pool.spare_prefix(), "spare-1073741824b-1000i-");
    }
}
