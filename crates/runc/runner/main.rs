//! threadbox's command runner: the init (pid 1) of every runc sandbox, and what starts the
//! sandbox user's commands in it, in place of a `runc exec` per command.
//!
//! `runc exec` costs about 20 ms a command on a 2-core machine (runc's Go runtime starts, reads
//! the container's state, and re-enters every namespace through `runc init`); this process is
//! already in all of them, so a command costs one `fork` and one `exec`. It is built apart from
//! the workspace (by `build.rs`: std only, statically linked, so it runs in any image root) and
//! given to `runc run` as an open file: `process.args` is `/proc/self/fd/3`, and fd 4 is a
//! listening Unix socket whose path only the host can reach (it is in the sandbox's bundle).
//!
//! One request per connection, from threadbox on the host:
//! - `sendmsg` of an 8-byte header (magic, payload length, little-endian `u32`s) carrying four
//!   descriptors: the command's stdin, stdout and stderr, and the status pipe it reports on as
//!   fd 3 (the same shell wrapper `runc exec` runs, so both paths end alike);
//! - the payload: NUL-terminated words, `cwd`, the number of environment entries, the entries
//!   (`NAME=value`), then the argv.
//!
//! The answer is one byte, `0` with a pidfd of the started command attached (the host waits on
//! it and finds the command's pid in its own namespace through it, then closes the connection;
//! the command is not reaped before), `1` followed by an error's words, or `2` followed by why
//! the runner declines a command `runc exec` can still start (a working directory the user
//! cannot enter, which runc enters before it drops to the user; another protocol version). The command is a session leader (`setsid`), as under `runc exec`, so a
//! timeout kills its whole group. As pid 1, the runner also reaps every orphan in the sandbox.
//!
//! The runner has the sandbox user's credentials and nothing more (no capabilities, `no new
//! privileges`, the seccomp filter), so nothing in the sandbox gains by reaching it; the host
//! treats what it answers as the sandbox's own words, bounded and checked.

use std::ffi::{c_char, c_void, CString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

/// The runner's own image, which `runc` exec'd it from.
const OWN_IMAGE: RawFd = 3;
/// The listening socket the host connects to.
const LISTENER: RawFd = 4;
/// "tbr1": the protocol's version.
const MAGIC: u32 = 0x7462_7231;
/// What a request may hold: the argv and environment are capped at 1 MiB by threadbox.
const MAX_PAYLOAD: usize = 2 * 1024 * 1024;
/// How long a connection may take to say its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The C library's calls std does not wrap (static glibc, Linux, 64-bit).
mod sys {
    use std::ffi::{c_char, c_int, c_long, c_void};

    pub const SOL_SOCKET: c_int = 1;
    pub const SCM_RIGHTS: c_int = 1;
    pub const MSG_CMSG_CLOEXEC: c_int = 0x4000_0000;
    pub const MSG_NOSIGNAL: c_int = 0x4000;
    pub const MSG_CTRUNC: c_int = 0x8;
    pub const SIG_BLOCK: c_int = 0;
    pub const SIG_SETMASK: c_int = 2;
    pub const SIGPIPE: c_int = 13;
    pub const F_DUPFD_CLOEXEC: c_int = 1030;
    pub const X_OK: c_int = 1;
    pub const SIGCHLD: c_int = 17;
    pub const SIGSEGV: c_int = 11;
    pub const SIGBUS: c_int = 7;
    pub const SIG_DFL: usize = 0;
    pub const SFD_CLOEXEC: c_int = 0o2_000_000;
    pub const SFD_NONBLOCK: c_int = 0o4_000;
    pub const WNOHANG: c_int = 1;
    pub const F_SETFD: c_int = 2;
    pub const FD_CLOEXEC: c_int = 1;
    pub const POLLIN: i16 = 1;
    pub const POLLHUP: i16 = 0x10;
    pub const POLLRDHUP: i16 = 0x2000;
    pub const SIGKILL: c_int = 9;
    pub const PR_SET_NAME: c_int = 15;
    pub const PR_SET_DUMPABLE: c_int = 4;
    pub const EINTR: i32 = 4;
    /// The same number on every 64-bit architecture (new calls share one table).
    pub const SYS_PIDFD_OPEN: c_long = 434;

    #[repr(C)]
    pub struct IoVec {
        pub base: *mut c_void,
        pub len: usize,
    }

    #[repr(C)]
    pub struct MsgHdr {
        pub name: *mut c_void,
        pub namelen: u32,
        pub iov: *mut IoVec,
        pub iovlen: usize,
        pub control: *mut c_void,
        pub controllen: usize,
        pub flags: c_int,
    }

    #[repr(C)]
    pub struct CmsgHdr {
        pub len: usize,
        pub level: c_int,
        pub kind: c_int,
    }

    #[repr(C)]
    pub struct PollFd {
        pub fd: c_int,
        pub events: i16,
        pub revents: i16,
    }

    /// glibc's `sigset_t`: 1024 bits.
    #[repr(C)]
    pub struct SigSet([u64; 16]);

    impl SigSet {
        pub fn empty() -> Self {
            SigSet([0; 16])
        }

        pub fn with(signal: c_int) -> Self {
            let mut set = SigSet([0; 16]);
            let bit = (signal - 1) as usize;
            set.0[bit / 64] |= 1 << (bit % 64);
            set
        }
    }

    extern "C" {
        pub fn recvmsg(fd: c_int, msg: *mut MsgHdr, flags: c_int) -> isize;
        pub fn sendmsg(fd: c_int, msg: *const MsgHdr, flags: c_int) -> isize;
        pub fn sigprocmask(how: c_int, set: *const SigSet, old: *mut SigSet) -> c_int;
        pub fn signalfd(fd: c_int, mask: *const SigSet, flags: c_int) -> c_int;
        pub fn poll(fds: *mut PollFd, n: u64, timeout: c_int) -> c_int;
        pub fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
        pub fn setsid() -> c_int;
        pub fn dup2(old: c_int, new: c_int) -> c_int;
        pub fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
        pub fn close(fd: c_int) -> c_int;
        pub fn kill(pid: c_int, signal: c_int) -> c_int;
        pub fn fork() -> c_int;
        pub fn chdir(path: *const c_char) -> c_int;
        pub fn access(path: *const c_char, mode: c_int) -> c_int;
        pub fn execve(
            path: *const c_char,
            argv: *const *const c_char,
            envp: *const *const c_char,
        ) -> c_int;
        pub fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
        pub fn _exit(status: c_int) -> !;
        pub fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
        pub fn prctl(option: c_int, ...) -> c_int;
        pub fn signal(signal: c_int, handler: usize) -> usize;
        pub fn syscall(number: c_long, ...) -> c_long;
    }
}

/// Room for the four descriptors of a request (and a few more, to notice and refuse them).
const CONTROL_WORDS: usize = 16;

fn main() {
    // runc's stdio was ours until now: let go of it (its stderr is how the host hears runc's
    // errors, and it ends when the last holder closes it).
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto this process's own stdio.
            unsafe { sys::dup2(null.as_raw_fd(), fd) };
        }
    }
    // SAFETY: descriptors runc passed to this process; nothing else owns them. The name is
    // what `ps` shows for pid 1 (its command line is runc's `/proc/self/fd/3`).
    unsafe {
        sys::prctl(sys::PR_SET_NAME, c"threadbox-init".as_ptr());
        // std reports stack overflows from handlers for SIGSEGV and SIGBUS; as pid 1 of its
        // namespace the runner gets no signal from the sandbox it does not handle, so those
        // handlers go: a `kill -SEGV 1` from inside is then dropped by the kernel instead of
        // interrupting the runner mid-request.
        sys::signal(sys::SIGSEGV, sys::SIG_DFL);
        sys::signal(sys::SIGBUS, sys::SIG_DFL);
        // Not dumpable: the sandbox's processes (the same uid) cannot open its memory or its
        // descriptors through /proc. Commands are dumpable again, as every exec resets it.
        sys::prctl(sys::PR_SET_DUMPABLE, 0);
        sys::close(OWN_IMAGE);
        sys::fcntl(LISTENER, sys::F_SETFD, sys::FD_CLOEXEC);
    }
    // SAFETY: fd 4 is the listening socket runc passed (`--preserve-fds`), owned from here on.
    let listener = unsafe { UnixListener::from_raw_fd(LISTENER) };
    let children = child_exits();
    loop {
        let mut fds = [
            sys::PollFd {
                fd: LISTENER,
                events: sys::POLLIN,
                revents: 0,
            },
            sys::PollFd {
                fd: children.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                events: sys::POLLIN,
                revents: 0,
            },
        ];
        // Without a signalfd, orphans are reaped once a second instead of at once.
        let timeout = if children.is_some() { -1 } else { 1000 };
        // SAFETY: `fds` is a valid array of two pollfds for the call's duration.
        let ready = unsafe { sys::poll(fds.as_mut_ptr(), 2, timeout) };
        if ready < 0 && std::io::Error::last_os_error().raw_os_error() != Some(sys::EINTR) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if fds[1].revents != 0 || children.is_none() {
            if let Some(children) = &children {
                drain(children);
            }
            reap_all();
        }
        if fds[0].revents != 0 {
            match listener.accept() {
                Ok((conn, _)) => serve(conn),
                // Out of descriptors or memory for the moment: the host retries or falls back.
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

/// A descriptor that becomes readable as children exit (`SIGCHLD` through a signalfd).
fn child_exits() -> Option<OwnedFd> {
    let set = sys::SigSet::with(sys::SIGCHLD);
    // SAFETY: plain calls with a valid signal set; the fd returned is owned by the caller.
    unsafe {
        if sys::sigprocmask(sys::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return None;
        }
        let fd = sys::signalfd(-1, &set, sys::SFD_CLOEXEC | sys::SFD_NONBLOCK);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

/// Empty the signalfd (its records are not needed: every exited child is reaped anyway).
fn drain(children: &OwnedFd) {
    let mut buf = [0u8; 128 * 8];
    // SAFETY: a read into a buffer of the stated size; the fd is non-blocking.
    while unsafe { sys::read(children.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
        == buf.len() as isize
    {}
}

/// Collect every child that has exited: commands, and orphans the sandbox left to pid 1.
fn reap_all() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        if unsafe { sys::waitpid(-1, &mut status, sys::WNOHANG) } <= 0 {
            return;
        }
    }
}

/// Serve one connection: read its request, start the command, answer.
fn serve(mut conn: UnixStream) {
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = conn.set_write_timeout(Some(REQUEST_TIMEOUT));
    let answer = read_request(&mut conn).and_then(|request| {
        // A host whose deadline passed while the runner was busy has closed the connection and
        // told its caller the command failed: nobody would watch it, so it must not start.
        if hung_up(&conn) {
            return Err(Answer::from("the host has gone"));
        }
        start(request)
    });
    match answer {
        Ok((pidfd, pid)) => {
            if send_with_fd(&conn, &[0], pidfd.as_raw_fd()).is_ok() {
                // The command is not reaped until the host has looked its pid up through the
                // pidfd (which names no pid once it is reaped): the host closes the connection
                // when it has, and the deadline bounds a host that never does.
                while let Err(e) = conn.read(&mut [0u8; 1]) {
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        break;
                    }
                }
            } else {
                // The host gave up while the command started: nobody watches it, so it goes.
                // SAFETY: `pid` is our unreaped child and leads its own group once it has
                // called setsid (before, it is alone), so these reach the command and no other.
                unsafe {
                    sys::kill(pid, sys::SIGKILL);
                    sys::kill(-pid, sys::SIGKILL);
                }
            }
        }
        Err(answer) => {
            let (code, words) = match answer {
                Answer::Refused(words) => (1u8, words),
                Answer::Declined(words) => (2u8, words),
            };
            let mut reply = vec![code];
            reply.extend_from_slice(words.as_bytes());
            let _ = conn.write_all(&reply);
        }
    }
}

/// Whether the host has closed its end of `conn`.
fn hung_up(conn: &UnixStream) -> bool {
    let mut fd = sys::PollFd {
        fd: conn.as_raw_fd(),
        events: sys::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration; no wait.
    let ready = unsafe { sys::poll(&mut fd, 1, 0) };
    ready > 0 && fd.revents & (sys::POLLHUP | sys::POLLRDHUP) != 0
}

/// What a request asks for.
struct Request {
    cwd: String,
    env: Vec<(String, String)>,
    argv: Vec<String>,
    /// stdin, stdout, stderr, status.
    fds: [OwnedFd; 4],
}

fn read_request(conn: &mut UnixStream) -> Result<Request, Answer> {
    let mut header = [0u8; 8];
    let (got, fds) = recv_with_fds(conn, &mut header)?;
    conn.read_exact(&mut header[got..])
        .map_err(|e| format!("reading the request: {e}"))?;
    let magic = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(header[4..].try_into().expect("4 bytes")) as usize;
    if magic != MAGIC {
        // Another version of threadbox: it can still start the command through `runc exec`.
        return Err(Answer::Declined(format!("unknown protocol {magic:#x}")));
    }
    if len > MAX_PAYLOAD {
        return Err(format!("a request of {len} bytes is over {MAX_PAYLOAD}").into());
    }
    let fds: [OwnedFd; 4] = fds
        .try_into()
        .map_err(|fds: Vec<OwnedFd>| format!("{} descriptors sent, 4 expected", fds.len()))?;
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload)
        .map_err(|e| format!("reading the request: {e}"))?;
    let mut words = payload
        .split(|b| *b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned());
    let cwd = words.next().ok_or("no working directory")?;
    let count: usize = words
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or("no environment count")?;
    let mut env = Vec::with_capacity(count.min(4096));
    for _ in 0..count {
        let entry = words.next().ok_or("the environment ends early")?;
        let (name, value) = entry.split_once('=').ok_or("an entry without '='")?;
        env.push((name.to_owned(), value.to_owned()));
    }
    let mut argv: Vec<String> = words.collect();
    // The payload ends with a NUL, which leaves one empty word after it.
    if argv.last().is_some_and(String::is_empty) {
        argv.pop();
    }
    if argv.is_empty() {
        return Err("an empty argv".into());
    }
    Ok(Request {
        cwd,
        env,
        argv,
        fds,
    })
}

/// Start the command, in its own session, with the request's stdio and the status pipe as
/// fd 3; a pidfd of it, and its pid.
///
/// A plain `fork`, and no wait for the child's `exec`: the child runs as the sandbox's user,
/// so anything in the sandbox can stop it (`kill -STOP -1`) before it execs, and a runner
/// waiting for that exec (as `std::process::Command` does) would serve nobody again. The host
/// watches the child from here on, whatever it does; an exec that fails says so on the
/// command's stderr and ends without a status.
fn start(request: Request) -> Result<(OwnedFd, i32), Answer> {
    let Request {
        cwd,
        env,
        argv,
        fds,
    } = request;
    let prepared = Prepared::new(&cwd, env, &argv)?;
    // SAFETY: this process has one thread, so the child may do anything until it execs; it
    // only makes system calls on what `prepared` holds.
    let pid = unsafe { sys::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Answer::Refused(format!("cannot fork: {e}")));
    }
    if pid == 0 {
        prepared.exec_in_child(&fds);
    }
    drop(fds);
    // SAFETY: pidfd_open of our own (unreaped, so not reusable) child; the fd is ours.
    let pidfd = unsafe { sys::syscall(sys::SYS_PIDFD_OPEN, pid, 0) };
    if pidfd < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: our unreaped child leads its own group once it has called setsid; before,
        // it is the only one to kill.
        unsafe {
            sys::kill(pid, sys::SIGKILL);
            sys::kill(-pid, sys::SIGKILL);
        }
        return Err(Answer::Refused(format!("cannot watch the command: {e}")));
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok((unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) }, pid))
}

/// Why a request did not start: refused (the host tells its caller), or declined (the host
/// starts the command through `runc exec` instead, which can do what the runner cannot).
enum Answer {
    Refused(String),
    Declined(String),
}

impl From<String> for Answer {
    fn from(words: String) -> Self {
        Answer::Refused(words)
    }
}

impl From<&str> for Answer {
    fn from(words: &str) -> Self {
        Answer::Refused(words.to_owned())
    }
}

/// Everything the child needs, made before the fork.
struct Prepared {
    cwd: CString,
    path: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
}

impl Prepared {
    fn new(cwd: &str, env: Vec<(String, String)>, argv: &[String]) -> Result<Self, Answer> {
        let c = |s: &str| CString::new(s).map_err(|_| Answer::from("a NUL in the request"));
        // `runc exec`'s words for it, which threadbox already tells the caller as a bad directory.
        if !std::path::Path::new(cwd).is_dir() {
            return Err(Answer::Refused(format!(
                "chdir to cwd ({cwd:?}) set in config.json failed: not a directory"
            )));
        }
        let cwd = c(cwd)?;
        // A directory the user cannot enter: `runc exec` enters it before it drops to the user,
        // and so runs the command there; the runner is the user already.
        // SAFETY: a NUL-terminated path.
        if unsafe { sys::access(cwd.as_ptr(), sys::X_OK) } != 0 {
            return Err(Answer::Declined(format!(
                "the user cannot enter {cwd:?}: {}",
                std::io::Error::last_os_error()
            )));
        }
        if !argv[0].starts_with('/') {
            return Err(Answer::Refused(format!(
                "{:?} is not an absolute path",
                argv[0]
            )));
        }
        let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os()
            .filter(|(name, _)| !env.iter().any(|(n, _)| name.as_bytes() == n.as_bytes()))
            .collect();
        vars.extend(env.into_iter().map(|(n, v)| (n.into(), v.into())));
        let env = vars
            .into_iter()
            .map(|(name, value)| {
                let mut entry = name.into_vec();
                entry.push(b'=');
                entry.extend(value.into_vec());
                CString::new(entry).map_err(|_| Answer::from("a NUL in the environment"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            cwd,
            path: c(&argv[0])?,
            argv: argv.iter().map(|a| c(a)).collect::<Result<_, _>>()?,
            env,
        })
    }

    /// In the child: a session of its own, the four descriptors at 0-3, the working directory,
    /// the signal state a new program expects (the runner blocks SIGCHLD and ignores SIGPIPE,
    /// which an exec would keep), then the exec. Never returns.
    fn exec_in_child(&self, fds: &[OwnedFd; 4]) -> ! {
        // SAFETY: system calls on this (child) process's own state and descriptors, with
        // pointers to data that lives until the exec.
        unsafe {
            let empty = sys::SigSet::empty();
            sys::sigprocmask(sys::SIG_SETMASK, &empty, std::ptr::null_mut());
            sys::signal(sys::SIGPIPE, sys::SIG_DFL);
            sys::setsid();
            // Each above 0-3 first, so one already sitting at a target is not overwritten.
            let mut moved = [-1; 4];
            for (to, fd) in moved.iter_mut().zip(fds) {
                *to = sys::fcntl(fd.as_raw_fd(), sys::F_DUPFD_CLOEXEC, 10);
            }
            for (target, fd) in moved.iter().enumerate() {
                if *fd < 0 || sys::dup2(*fd, target as i32) < 0 {
                    child_fails("cannot set up the command's descriptors");
                }
            }
            if sys::chdir(self.cwd.as_ptr()) != 0 {
                child_fails("chdir to cwd failed");
            }
            let mut argv: Vec<*const c_char> = self.argv.iter().map(|a| a.as_ptr()).collect();
            argv.push(std::ptr::null());
            let mut env: Vec<*const c_char> = self.env.iter().map(|e| e.as_ptr()).collect();
            env.push(std::ptr::null());
            sys::execve(self.path.as_ptr(), argv.as_ptr(), env.as_ptr());
            child_fails("cannot start the command");
        }
    }
}

/// In the child, before the exec: say why on stderr (the command's, fd 2 once set up) and end
/// with `sh`'s status for a command that could not run.
fn child_fails(what: &str) -> ! {
    let message = format!(
        "threadbox-init: {what}: {}\n",
        std::io::Error::last_os_error()
    );
    // SAFETY: a write of a live buffer, then the exit that runs nothing of this process's.
    unsafe {
        sys::write(2, message.as_ptr().cast(), message.len());
        sys::_exit(127)
    }
}

/// `recvmsg` into `buf`, with the descriptors sent along (close-on-exec). A request with more
/// descriptors than there is room for is refused (those that came are closed with the error).
fn recv_with_fds(conn: &UnixStream, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>), String> {
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = sys::IoVec {
        base: buf.as_mut_ptr().cast::<c_void>(),
        len: buf.len(),
    };
    let mut msg = sys::MsgHdr {
        name: std::ptr::null_mut(),
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: control.as_mut_ptr().cast::<c_void>(),
        controllen: std::mem::size_of_val(&control),
        flags: 0,
    };
    let got = loop {
        // SAFETY: `msg` points at live buffers of the stated sizes for the call's duration.
        let got = unsafe { sys::recvmsg(conn.as_raw_fd(), &mut msg, sys::MSG_CMSG_CLOEXEC) };
        if got >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(sys::EINTR) {
            break got;
        }
    };
    if got < 0 {
        return Err(format!(
            "reading the request: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut fds = Vec::new();
    let header = std::mem::size_of::<sys::CmsgHdr>();
    let mut offset = 0usize;
    let bytes = msg.controllen.min(std::mem::size_of_val(&control));
    let base = control.as_ptr().cast::<u8>();
    while offset + header <= bytes {
        // SAFETY: within `control`, at a cmsg boundary (8-aligned, as the kernel lays them).
        let cmsg = unsafe { &*base.add(offset).cast::<sys::CmsgHdr>() };
        if cmsg.len < header || offset + cmsg.len > bytes {
            break;
        }
        if cmsg.level == sys::SOL_SOCKET && cmsg.kind == sys::SCM_RIGHTS {
            let count = (cmsg.len - header) / 4;
            for i in 0..count {
                // SAFETY: the kernel wrote `count` descriptors after the header.
                let fd = unsafe {
                    base.add(offset + header + 4 * i)
                        .cast::<i32>()
                        .read_unaligned()
                };
                // SAFETY: a descriptor just received: nothing else owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        offset += (cmsg.len + 7) & !7;
    }
    if msg.flags & sys::MSG_CTRUNC != 0 {
        return Err("too many descriptors sent".into());
    }
    Ok((got as usize, fds))
}

/// `sendmsg` of `data` with `fd` attached.
fn send_with_fd(conn: &UnixStream, data: &[u8], fd: RawFd) -> std::io::Result<()> {
    let mut control = [0u64; 3];
    let header = std::mem::size_of::<sys::CmsgHdr>();
    // SAFETY: the header and one descriptor fit the 24 bytes of `control`.
    unsafe {
        let cmsg = control.as_mut_ptr().cast::<sys::CmsgHdr>();
        (*cmsg).len = header + 4;
        (*cmsg).level = sys::SOL_SOCKET;
        (*cmsg).kind = sys::SCM_RIGHTS;
        control
            .as_mut_ptr()
            .cast::<u8>()
            .add(header)
            .cast::<i32>()
            .write_unaligned(fd);
    }
    let mut iov = sys::IoVec {
        base: data.as_ptr() as *mut c_void,
        len: data.len(),
    };
    let msg = sys::MsgHdr {
        name: std::ptr::null_mut(),
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: control.as_mut_ptr().cast::<c_void>(),
        controllen: std::mem::size_of_val(&control),
        flags: 0,
    };
    loop {
        // SAFETY: `msg` points at live buffers of the stated sizes for the call's duration.
        if unsafe { sys::sendmsg(conn.as_raw_fd(), &msg, sys::MSG_NOSIGNAL) } >= 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
