//! The host's side of the sandbox's command runner (`runner/main.rs`): its image, the socket
//! it listens on, and the one request that starts a command through it.
//!
//! The runner is every container's init, started by `runc run` from a sealed memfd of the
//! binary `build.rs` made (fd 3, `process.args` = `/proc/self/fd/3`), with a listening socket
//! made here in the bundle's `run/` directory (fd 4). A command then costs a connection to
//! it, a `fork` and an `exec` in the sandbox, not a `runc exec` (about 20 ms of runc's own
//! start-up a command on a 2-core machine; see BENCHMARKS.md, "At the floor").
//!
//! The runner runs as the sandbox user, so it starts only the sandbox user's commands; a
//! command as root, and every command in a sandbox made before the runner (no socket in its
//! bundle), still goes through `runc exec`. The runner is inside the sandbox and so, like
//! everything there, hostile: what it answers is bounded, checked and given a deadline, and
//! the only thing taken from it is a pidfd, whose process the host then finds in its own pid
//! namespace (`/proc/self/fdinfo`).

use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};

/// The runner, as `build.rs` made it for this target: empty where it could not.
static RUNNER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/threadbox-runner"));

/// The runner's socket, in a bundle's `run/` directory.
const SOCKET: &str = "runner.sock";
/// The protocol's version, as the runner checks it ("tbr1").
const MAGIC: u32 = 0x7462_7231;
/// The most of a refusal's words that is read.
const MAX_ANSWER: usize = 4096;
/// Where `process.args` points the container's init: the runner's image, passed as fd 3.
pub(crate) const INIT_PATH: &str = "/proc/self/fd/3";

/// The runner's image in a sealed memfd, made once per provider: each container's init is
/// exec'd from it (runc's own guard against a container rewriting its binary, CVE-2019-5736,
/// is the same idea: nothing in a sandbox can change what the next one starts).
pub(crate) struct RunnerImage(OwnedFd);

impl RunnerImage {
    /// The image, or `None` when this build has no runner (see `build.rs`).
    pub(crate) fn load() -> io::Result<Option<Self>> {
        use rustix::fs::{fchmod, fcntl_add_seals, memfd_create, MemfdFlags, Mode, SealFlags};
        if RUNNER.is_empty() {
            return Ok(None);
        }
        let fd = memfd_create(
            "threadbox-runner",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let mut file = File::from(fd);
        file.write_all(RUNNER)?;
        fchmod(&file, Mode::from_raw_mode(0o555))?;
        fcntl_add_seals(
            &file,
            SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )?;
        Ok(Some(Self(file.into())))
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
}

/// Make the socket a new container's runner will listen on (any left by an earlier container
/// of the same bundle is replaced): the listening descriptor, for `runc run` to pass on.
pub(crate) fn listen(run_dir: &Path) -> io::Result<OwnedFd> {
    let dir = open_dir(run_dir)?;
    let path = socket_path(&dir);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(std::os::unix::net::UnixListener::bind(&path)?.into())
}

/// How starting a command through the runner failed.
#[derive(Debug)]
pub(crate) enum StartError {
    /// No runner listens (a sandbox made without one): nothing was sent, so the command can
    /// go through `runc exec` instead.
    Unreachable,
    /// The runner declined what `runc exec` can still do (a working directory the user cannot
    /// enter, another protocol version): nothing started; its words.
    Declined(String),
    /// The runner read the request and did not start the command; its words.
    Refused(String),
    /// The exchange broke off or ran past its deadline: whether the command started is not
    /// known.
    Broken(String),
}

/// A command the runner started: its pid in the host's namespace (a session and process-group
/// leader) and a pidfd that becomes readable when it exits.
pub(crate) struct Started {
    pub leader: i32,
    pub exited: OwnedFd,
}

/// Ask the runner in `run_dir` to start `argv` with `cwd` and `env`, the four descriptors
/// (stdin, stdout, stderr and the status pipe) as its fds 0-3; at most `within` for the
/// answer.
pub(crate) async fn start(
    run_dir: &Path,
    argv: &[&str],
    cwd: &str,
    env: &std::collections::BTreeMap<String, String>,
    fds: [BorrowedFd<'_>; 4],
    within: Duration,
) -> Result<Started, StartError> {
    let dir = open_dir(run_dir).map_err(|_| StartError::Unreachable)?;
    let mut stream = tokio::net::UnixStream::connect(socket_path(&dir))
        .await
        .map_err(|_| StartError::Unreachable)?;
    drop(dir);
    let payload = encode(argv, cwd, env);
    let exchange = async {
        let mut header = MAGIC.to_le_bytes().to_vec();
        header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        send_with_fds(&stream, &header, &fds).await?;
        stream.write_all(&payload).await?;
        let (first, pidfd) = receive_with_fd(&stream).await?;
        match (first, pidfd) {
            (Some(0), Some(pidfd)) => Ok(Ok(pidfd)),
            (Some(code @ (1 | 2)), _) => {
                let mut words = Vec::new();
                (&mut stream)
                    .take(MAX_ANSWER as u64)
                    .read_to_end(&mut words)
                    .await?;
                let words = String::from_utf8_lossy(&words).into_owned();
                Ok(Err(if code == 1 {
                    StartError::Refused(words)
                } else {
                    StartError::Declined(words)
                }))
            }
            (first, _) => Err(io::Error::other(format!(
                "an answer the runner does not give ({first:?})"
            ))),
        }
    };
    let pidfd = match tokio::time::timeout(within, exchange).await {
        Err(_) => {
            return Err(StartError::Broken(format!(
                "the sandbox's command runner did not answer within {within:?}"
            )))
        }
        Ok(Err(e)) => {
            return Err(StartError::Broken(format!(
                "the sandbox's command runner broke off: {e}"
            )))
        }
        Ok(Ok(Err(not_started))) => return Err(not_started),
        Ok(Ok(Ok(pidfd))) => pidfd,
    };
    // Looked up before the connection closes, which is what lets the runner reap the command.
    let Some(leader) = host_pid(&pidfd) else {
        // Whatever it is, nobody will watch it.
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        return Err(StartError::Broken(
            "the sandbox's command runner answered with no process".into(),
        ));
    };
    drop(stream);
    Ok(Started {
        leader,
        exited: pidfd,
    })
}

/// The request's payload: NUL-terminated words, as `runner/main.rs` reads them.
fn encode(argv: &[&str], cwd: &str, env: &std::collections::BTreeMap<String, String>) -> Vec<u8> {
    let mut payload = Vec::new();
    let mut word = |w: &[u8]| {
        payload.extend_from_slice(w);
        payload.push(0);
    };
    word(cwd.as_bytes());
    word(env.len().to_string().as_bytes());
    for (key, value) in env {
        word(format!("{key}={value}").as_bytes());
    }
    for arg in argv {
        word(arg.as_bytes());
    }
    payload
}

async fn send_with_fds(
    stream: &tokio::net::UnixStream,
    data: &[u8],
    fds: &[BorrowedFd<'_>; 4],
) -> io::Result<()> {
    let sent = stream
        .async_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(fds));
            rustix::net::sendmsg(
                stream,
                &[IoSlice::new(data)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
            .map_err(io::Error::from)
        })
        .await?;
    if sent != data.len() {
        return Err(io::Error::other("the request's header was cut short"));
    }
    Ok(())
}

/// The answer's first byte, with the descriptor that came with it (more than one: refused).
async fn receive_with_fd(
    stream: &tokio::net::UnixStream,
) -> io::Result<(Option<u8>, Option<OwnedFd>)> {
    stream
        .async_io(Interest::READABLE, || {
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut byte = [0u8; 1];
            let got = rustix::net::recvmsg(
                stream,
                &mut [io::IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(io::Error::from)?;
            let mut fds: Vec<OwnedFd> = Vec::new();
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(received) = message {
                    fds.extend(received);
                }
            }
            let first = (got.bytes == 1).then_some(byte[0]);
            Ok((first, (fds.len() == 1).then(|| fds.remove(0))))
        })
        .await
}

/// The pid, in the host's namespace, of the process `pidfd` refers to; `None` when it is not
/// a pidfd, or names no process the host could signal (gone, or pid 1).
fn host_pid(pidfd: &OwnedFd) -> Option<i32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    let pid: i32 = info
        .lines()
        .find_map(|line| line.strip_prefix("Pid:"))?
        .trim()
        .parse()
        .ok()?;
    (pid > 1).then_some(pid)
}

/// The bundle's `run/` directory, held open: its socket is then reached through
/// `/proc/self/fd`, whatever the length of the state directory's path (a socket's path is at
/// most 107 bytes).
fn open_dir(run_dir: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(run_dir)
}

fn socket_path(dir: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}/{SOCKET}", dir.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_nul_terminated_words() {
        let env = [("A".to_owned(), "1=2".to_owned())].into_iter().collect();
        let payload = encode(&["/bin/sh", "-c", "echo hi"], "/home/user", &env);
        assert_eq!(
            payload,
            b"/home/user\x001\x00A=1=2\x00/bin/sh\x00-c\x00echo hi\x00"
        );
    }

    #[test]
    #[cfg(feature = "command-runner")]
    fn the_image_is_sealed() {
        let image = RunnerImage::load()
            .unwrap()
            .expect("build.rs builds the runner for the host (is libc.a installed?)");
        let mut file = File::from(image.fd().try_clone_to_owned().unwrap());
        assert!(
            file.write_all(b"x").is_err(),
            "a sealed image refuses writes"
        );
    }

    #[test]
    fn a_pid_comes_from_a_pidfd_only() {
        let me = rustix::process::getpid();
        let pidfd = rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty()).unwrap();
        assert_eq!(host_pid(&pidfd), Some(me.as_raw_nonzero().get()));
        let not_a_pidfd: OwnedFd = File::open("/dev/null").unwrap().into();
        assert_eq!(host_pid(&not_a_pidfd), None);
    }
}
