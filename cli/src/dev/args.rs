//! `threadbox dev`'s flags: what each sets, its default, and the checks made when they are read
//! (each flag's value) and before anything starts (how they go together).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use threadbox_core::domain::{
    parse_profile, Budgets, ImageDefaults, ImageName, NetworkDefaults, NetworkProfile,
    SCOPE_COMPUTE_BUDGET_VAR, SCOPE_CREATES_PER_HOUR_VAR, THREAD_COMPUTE_BUDGET_VAR, WARM_POOL_VAR,
};
use threadbox_core::domain::{
    CheckpointRetention, CHECKPOINTS_KEPT_VAR, CHECKPOINT_BYTES_VAR, DEFAULT_CHECKPOINTS_KEPT,
    MAX_CHECKPOINTS_PER_THREAD,
};
use threadbox_core::ports::IpNet;
use threadbox_core::usecases::MAX_POOL_SIZE;
use threadbox_runc::DiskQuota;

use super::{api_keys, images, preflight, provider, ws_limits};
use crate::duration;

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Port for the HTTP API on 127.0.0.1 (0 picks a free one).
    #[arg(long, env = "THREADBOX_PORT", default_value_t = 8787)]
    pub port: u16,

    /// Where the database and the sandboxes live.
    #[arg(long, env = "THREADBOX_DATA_DIR", default_value = ".threadbox")]
    pub data_dir: PathBuf,

    /// Pause a sandbox after this long without activity.
    #[arg(long, env = "THREADBOX_IDLE_PAUSE", default_value = "10m", value_parser = duration::parse)]
    pub idle_pause: Duration,

    /// Destroy a sandbox (and its files) after this long without activity.
    #[arg(long, env = "THREADBOX_RETENTION", default_value = "7d", value_parser = duration::parse)]
    pub retention: Duration,

    /// Keep a destroyed or expired thread's record and events this long, then delete them.
    #[arg(long, env = "THREADBOX_RECORD_RETENTION", default_value = "30d", value_parser = duration::parse)]
    pub record_retention: Duration,

    /// How often the janitor sweeps.
    #[arg(long, env = "THREADBOX_JANITOR_INTERVAL", default_value = "60s", value_parser = duration::parse)]
    pub janitor_interval: Duration,

    /// How long one worker may keep a thread creating, pausing, resuming or deleting; past it the
    /// janitor takes the worker for dead and recovers the thread.
    #[arg(long, env = "THREADBOX_LEASE", default_value = "2m", value_parser = duration::parse)]
    pub lease: Duration,

    /// How long a lifecycle event waits before it is delivered again when a fan-out target asked
    /// to retry or the process stopped mid-delivery (the lifecycle queue's visibility timeout).
    #[arg(long, env = "THREADBOX_FANOUT_RETRY", default_value = "30s", value_parser = duration::parse)]
    pub fanout_retry: Duration,

    /// A file of API keys callers must present as `Authorization: Bearer <key>`, one per line
    /// or comma-separated, each at least 32 characters. The keys may instead be given in
    /// THREADBOX_API_KEYS. Neither means no authentication, for this machine only.
    #[arg(long, env = "THREADBOX_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// A JSON file of headers the egress proxy adds to networked sandboxes' requests, per host
    /// (exact or *.suffix): {"api.github.com": {"Authorization": "Bearer ..."}}. Owner-only
    /// (chmod 600); the sandboxes never see it. On E2B they become its egress rules.
    #[arg(long, env = "THREADBOX_EGRESS_CREDENTIALS_FILE")]
    pub egress_credentials_file: Option<PathBuf>,

    /// Private or metadata networks (IPv4 CIDRs, comma-separated) that networked sandboxes may
    /// still reach when their allowlist names them, e.g. an internal package mirror at
    /// 10.1.2.0/24. Every other private, link-local and metadata address stays refused; no API
    /// caller can open one.
    #[arg(long, env = "THREADBOX_NETWORK_OPEN", default_value = "", value_parser = parse_open_networks)]
    pub network_open: OpenNetworks,

    /// Most live-events WebSocket connections one token may hold open at once.
    #[arg(long, env = "THREADBOX_WS_MAX_PER_TOKEN", default_value_t = ws_limits::ConnectionLimits::default().per_token)]
    pub ws_max_per_token: usize,

    /// Most live-events WebSocket connections one client address may hold open at once.
    #[arg(long, env = "THREADBOX_WS_MAX_PER_ADDRESS", default_value_t = ws_limits::ConnectionLimits::default().per_address)]
    pub ws_max_per_address: usize,

    /// Slack messages acted on per minute in one thread; past it the thread is told to slow
    /// down, once a minute.
    #[arg(long, env = "THREADBOX_SLACK_THREAD_RATE", default_value_t = threadbox_slack::RateLimits::default().per_thread)]
    pub slack_thread_rate: u64,

    /// Slack messages acted on per minute in one workspace (team), all threads together.
    #[arg(long, env = "THREADBOX_SLACK_TEAM_RATE", default_value_t = threadbox_slack::RateLimits::default().per_team)]
    pub slack_team_rate: u64,

    /// Run sandboxes even on a runc that lacks the fix for a known container escape (by default
    /// threadbox dev refuses to start on one, naming the CVE and the upgrade).
    #[arg(long, env = "THREADBOX_ALLOW_UNPATCHED_RUNC")]
    pub allow_unpatched_runc: bool,

    /// Commands one thread's sandbox may run at once; past it exec answers 429
    /// `too_many_commands_in_thread` with Retry-After.
    #[arg(long, env = "THREADBOX_MAX_COMMANDS_PER_THREAD", default_value_t = 4)]
    pub max_commands_per_thread: usize,

    /// Commands all sandboxes may run at once (default: 32 per core); past it 503
    /// `too_many_commands`.
    #[arg(long, env = "THREADBOX_MAX_COMMANDS")]
    pub max_commands: Option<usize>,

    /// Sandboxes alive at once, paused ones included (default: as many as fit in memory at
    /// 512 MiB each); past it 503 `too_many_sandboxes`.
    #[arg(long, env = "THREADBOX_MAX_SANDBOXES")]
    pub max_sandboxes: Option<usize>,

    /// Where sandboxes run: runc (local containers; Linux, as root or rootless) or e2b (E2B's cloud,
    /// with E2B_API_KEY and the other E2B_* settings). Default: THREADBOX_PROVIDER, else runc.
    #[arg(long, value_parser = ["runc", "e2b"])]
    pub provider: Option<String>,

    /// The most one thread's /home/user may hold, e.g. 2GiB or 500MiB: the home is a filesystem
    /// of its own that size, and writing past it gets "No space left on device" (the API's file
    /// uploads too). `none` makes the home a plain directory on this machine's disk, unlimited.
    /// Default: 2GiB as root; none rootless, where a quota cannot be had (it needs mounts).
    #[arg(long, env = "THREADBOX_DISK_QUOTA", value_parser = parse_disk_quota)]
    pub disk_quota: Option<DiskQuotaArg>,

    /// The largest file a process in a sandbox may write (past it: "File too large"), and so the
    /// largest upload through the file API (past it: 413), e.g. 1GiB or 100MiB.
    #[arg(long, env = "THREADBOX_MAX_FILE_SIZE", default_value = "1GiB", value_parser = parse_size)]
    pub max_file_size: u64,

    /// The most files (and directories) one thread's /home/user may hold, with --disk-quota.
    #[arg(long, env = "THREADBOX_DISK_FILES", default_value_t = DiskQuota::default().inodes)]
    pub disk_files: u64,

    /// The network profile of a new thread whose creator names none: restricted (no outbound
    /// traffic), networked (every public address) or networked:ENTRY,ENTRY,... (domains,
    /// *.suffix, IPs and CIDRs).
    #[arg(long, env = "THREADBOX_NETWORK", default_value = "restricted", value_parser = parse_network)]
    pub network: NetworkProfile,

    /// Per Slack workspace or channel, the profile of its new threads:
    /// 'T0123=networked:pypi.org;T0123/C0456=restricted' (a channel beats its workspace).
    #[arg(long, env = "THREADBOX_SLACK_NETWORK", default_value = "", value_parser = parse_slack_network)]
    pub slack_network: String,

    /// Register an image new threads may start from, NAME=SOURCE (repeatable): on runc an OCI
    /// image layout directory or archive, or a root filesystem directory or tarball. The
    /// environment variable takes NAME=SOURCE,NAME=SOURCE. `host` (the host's /usr) is always
    /// there. See docs/images.md.
    #[arg(long = "image", env = "THREADBOX_IMAGES", value_delimiter = ',', value_parser = images::parse_image)]
    pub images: Vec<(ImageName, String)>,

    /// A registered image's set-up step, NAME=FILE (repeatable): a JSON file of files to write
    /// and a command to run in each new sandbox of it before its first command
    /// (`{"files": {PATH: TEXT}, "run": "...", "user": "root", "timeout_secs": 300}`).
    #[arg(long = "image-setup", value_parser = images::parse_image_setup)]
    pub image_setups: Vec<(ImageName, PathBuf)>,

    /// The image of a new thread whose creator names none (`host` unless set).
    #[arg(long, env = "THREADBOX_DEFAULT_IMAGE", default_value = "host", value_parser = images::parse_image_name)]
    pub default_image: ImageName,

    /// Per Slack workspace or channel, the image of its new threads:
    /// 'T0123=python;T0123/C0456=node' (a channel beats its workspace).
    #[arg(long, env = "THREADBOX_SLACK_IMAGE", default_value = "", value_parser = images::parse_slack_image)]
    pub slack_image: String,

    /// Compute budget of one thread per UTC day, in vCPU-seconds (running seconds times the
    /// sandbox's vCPUs); past it the thread is paused until the next day. 0: none.
    #[arg(long, env = THREAD_COMPUTE_BUDGET_VAR, default_value_t = 0)]
    pub thread_compute_budget: u64,

    /// Compute budget of one Slack workspace or API key per UTC day, in vCPU-seconds, all its
    /// threads together. 0: none.
    #[arg(long, env = SCOPE_COMPUTE_BUDGET_VAR, default_value_t = 0)]
    pub scope_compute_budget: u64,

    /// New sandboxes one Slack workspace or API key may create per UTC clock hour; past it a
    /// create is refused (429) before anything is made. 0: no cap.
    #[arg(long, env = SCOPE_CREATES_PER_HOUR_VAR, default_value_t = 0)]
    pub scope_creates_per_hour: u64,

    /// Sandboxes kept created ahead, per network profile new threads get, so a new thread's first
    /// command does not wait for a create; the janitor refills the pool each sweep. Default: 2
    /// with runc, 0 with E2B (members there cost running time). 0: no pool.
    #[arg(long, env = WARM_POOL_VAR, value_parser = parse_pool_size)]
    pub warm_pool: Option<usize>,

    /// A pool member unclaimed this long is replaced by a fresh one.
    #[arg(long, env = "THREADBOX_WARM_POOL_MAX_AGE", default_value = "30m", value_parser = duration::parse)]
    pub warm_pool_max_age: Duration,

    /// While a compute budget is set, how often the janitor looks at a running thread.
    #[arg(long, env = "THREADBOX_BUDGET_CHECK", default_value = "5m", value_parser = duration::parse)]
    pub budget_check: Duration,

    /// Checkpoints kept per thread (1 to 100); a new one past it drops the oldest.
    #[arg(long, env = CHECKPOINTS_KEPT_VAR, default_value_t = DEFAULT_CHECKPOINTS_KEPT, value_parser = parse_checkpoints_kept)]
    pub checkpoints_kept: u32,

    /// The bytes one thread's checkpoints may hold together (a size like 2GiB); a new one past
    /// it drops the oldest, and a home holding more than this alone is refused a checkpoint.
    #[arg(long, env = CHECKPOINT_BYTES_VAR, default_value = "2GiB", value_parser = parse_size)]
    pub checkpoint_bytes: u64,

    /// Take a checkpoint before each Slack code block runs, for its Undo button.
    #[arg(long, env = "THREADBOX_CHECKPOINT_TURNS", default_value_t = true, action = clap::ArgAction::Set)]
    pub checkpoint_turns: bool,

    /// Refused: keys on the command line show in `ps` to every local user.
    #[arg(long, hide = true)]
    pub api_keys: Option<String>,
}

/// `--disk-quota`: a size, or none at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskQuotaArg {
    Bytes(u64),
    None,
}

/// A size like 2GiB, 500MiB or 1000000 (bytes).
fn parse_size(raw: &str) -> Result<u64, String> {
    let bytes = raw
        .trim()
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("{raw:?} is not a size like 2GiB or 500MiB: {e}"))?
        .as_u64();
    if bytes == 0 {
        return Err(format!(
            "{raw:?}: a size of nothing leaves nothing to write"
        ));
    }
    Ok(bytes)
}

/// `--checkpoints-kept`: 1 to the most a thread may keep.
fn parse_checkpoints_kept(raw: &str) -> Result<u32, String> {
    match raw.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_CHECKPOINTS_PER_THREAD).contains(&n) => Ok(n),
        _ => Err(format!(
            "{raw:?}: a thread keeps 1 to {MAX_CHECKPOINTS_PER_THREAD} checkpoints"
        )),
    }
}

/// `--warm-pool`: a count up to the pool's cap.
fn parse_pool_size(raw: &str) -> Result<usize, String> {
    match raw.trim().parse::<usize>() {
        Ok(n) if n <= MAX_POOL_SIZE => Ok(n),
        _ => Err(format!(
            "{raw:?}: a warm pool is 0 to {MAX_POOL_SIZE} sandboxes per network profile"
        )),
    }
}

fn parse_network(raw: &str) -> Result<NetworkProfile, String> {
    parse_profile(raw).map_err(|e| e.to_string())
}

/// `--network-open`: the operator's exceptions to the always-refused networks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenNetworks(pub Vec<IpNet>);

fn parse_open_networks(raw: &str) -> Result<OpenNetworks, String> {
    let mut nets = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let net: IpNet = entry.parse().map_err(|why| format!("{entry:?}: {why}"))?;
        if !net.is_ipv4() {
            return Err(format!(
                "{entry:?}: only IPv4 networks can be opened (sandboxes have no IPv6)"
            ));
        }
        nets.push(net);
    }
    Ok(OpenNetworks(nets))
}

fn parse_slack_network(raw: &str) -> Result<String, String> {
    NetworkDefaults::default()
        .with_slack_setting(raw)
        .map(|_| raw.to_owned())
        .map_err(|e| e.to_string())
}

impl DevArgs {
    /// The budgets the flags set (0 is off).
    pub(super) fn budgets(&self) -> Budgets {
        let limit = |n: u64| (n > 0).then_some(n);
        Budgets {
            thread_compute_per_day: limit(self.thread_compute_budget),
            scope_compute_per_day: limit(self.scope_compute_budget),
            scope_creates_per_hour: limit(self.scope_creates_per_hour),
            // At least 10 s: shorter would have the janitor read running threads every sweep.
            check_every: self.budget_check.max(Duration::from_secs(10)),
        }
    }

    /// The warm pool's size per profile: the flag, else 2 for runc and 0 for E2B.
    /// The checkpoint limits the flags set.
    pub(super) fn checkpoint_retention(&self) -> anyhow::Result<CheckpointRetention> {
        CheckpointRetention::new(self.checkpoints_kept, self.checkpoint_bytes)
            .map_err(|e| anyhow::anyhow!("--checkpoints-kept / --checkpoint-bytes: {e}"))
    }

    pub(super) fn warm_pool_size(&self, provider: &provider::ChosenProvider) -> usize {
        self.warm_pool.unwrap_or(if provider.is_runc() {
            threadbox_runc::DEFAULT_WARM_POOL
        } else {
            0
        })
    }

    /// The images new threads get (both settings were checked when the flags were read; that
    /// the provider has them, once it is open: `images::check_defaults`).
    pub fn image_defaults(&self) -> anyhow::Result<ImageDefaults> {
        ImageDefaults::new(self.default_image.clone())
            .with_slack_setting(&self.slack_image)
            .context("--slack-image")
    }

    /// The images the flags register, set-up files read and checked (see `images`).
    pub fn image_registrations(&self) -> anyhow::Result<Vec<threadbox_runc::ImageRegistration>> {
        images::registrations(&self.images, &self.image_setups)
    }

    /// The profiles new threads get (both settings were checked when the flags were read).
    pub fn network_defaults(&self) -> anyhow::Result<NetworkDefaults> {
        NetworkDefaults::new(self.network.clone())
            .with_slack_setting(&self.slack_network)
            .context("--slack-network")
    }
}

fn parse_disk_quota(raw: &str) -> Result<DiskQuotaArg, String> {
    if raw.trim().eq_ignore_ascii_case("none") {
        return Ok(DiskQuotaArg::None);
    }
    let bytes = parse_size(raw).map_err(|e| format!("{e} (or none)"))?;
    if bytes < DiskQuota::MIN_BYTES {
        return Err(format!(
            "{raw:?} is too small for a filesystem: at least {}",
            bytesize::ByteSize::b(DiskQuota::MIN_BYTES).display().iec()
        ));
    }
    Ok(DiskQuotaArg::Bytes(bytes))
}

impl DevArgs {
    /// The sandboxes' disk quota, if they have one.
    pub(super) fn disk_quota(&self) -> Option<DiskQuota> {
        self.disk_quota_for(preflight::rootless())
    }

    /// The quota asked for, else the default: 2 GiB, or none when the sandboxes run rootless.
    pub(super) fn disk_quota_for(&self, rootless: bool) -> Option<DiskQuota> {
        let bytes = match self.disk_quota {
            Some(DiskQuotaArg::Bytes(bytes)) => bytes,
            Some(DiskQuotaArg::None) => return None,
            None if rootless => return None,
            None => DiskQuota::default().bytes,
        };
        Some(DiskQuota {
            bytes,
            inodes: self.disk_files,
        })
    }

    pub(super) fn validate(&self) -> anyhow::Result<()> {
        if self.api_keys.is_some() {
            bail!(
                "--api-keys is not accepted: a command line shows in `ps` to every local user. \
                 Put the keys in {} or in a file named by --api-keys-file",
                api_keys::KEYS_ENV
            );
        }
        if self.janitor_interval < Duration::from_secs(1) {
            bail!("--janitor-interval must be at least 1s");
        }
        if self.lease < Duration::from_secs(1) || self.fanout_retry < Duration::from_secs(1) {
            bail!("--lease and --fanout-retry must be at least 1s");
        }
        if self.slack_thread_rate == 0 || self.slack_team_rate == 0 {
            bail!(
                "--slack-thread-rate and --slack-team-rate must be at least 1 (messages a minute)"
            );
        }
        if self.max_commands_per_thread == 0
            || self.max_commands == Some(0)
            || self.max_sandboxes == Some(0)
        {
            bail!(
                "--max-commands-per-thread, --max-commands and --max-sandboxes must be at least 1"
            );
        }
        if self.disk_files < DiskQuota::MIN_INODES {
            bail!("--disk-files must be at least {}", DiskQuota::MIN_INODES);
        }
        if self.ws_max_per_token == 0 || self.ws_max_per_address == 0 {
            bail!("--ws-max-per-token and --ws-max-per-address must be at least 1");
        }
        if self.idle_pause.is_zero() {
            bail!("--idle-pause must be more than zero");
        }
        if self.idle_pause >= self.retention {
            bail!(
                "--idle-pause ({}) must be shorter than --retention ({}): a sandbox is paused \
                 before it is destroyed",
                duration::format(self.idle_pause),
                duration::format(self.retention)
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        dev: DevArgs,
    }

    fn parse(args: &[&str]) -> Result<DevArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("dev").chain(args.iter().copied())).map(|w| w.dev)
    }

    #[test]
    fn open_networks_are_ipv4_cidrs_named_when_wrong() {
        assert_eq!(parse(&[]).unwrap().network_open, OpenNetworks::default());
        let open = parse(&["--network-open", "10.1.2.0/24, 172.16.0.9"])
            .unwrap()
            .network_open;
        let shown: Vec<String> = open.0.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.1.2.0/24", "172.16.0.9"]);
        let err = parse(&["--network-open", "10.0.0.0/33"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("10.0.0.0/33"), "{err}");
        let err = parse(&["--network-open", "fd00::/8"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("only IPv4"), "{err}");
    }

    #[test]
    fn image_flags_register_images_and_choose_the_defaults() {
        let unset = parse(&[]).unwrap();
        assert!(unset.images.is_empty());
        assert_eq!(unset.image_defaults().unwrap(), ImageDefaults::default());
        assert!(unset.image_registrations().unwrap().is_empty());

        let set = parse(&[
            "--image",
            "py=/srv/py.tar",
            "--image",
            "deb=/srv/deb,node=/srv/node",
            "--default-image",
            "py",
            "--slack-image",
            "T1=deb;T1/C1=host",
        ])
        .unwrap();
        let names: Vec<&str> = set.images.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["py", "deb", "node"],
            "repeated, and comma-separated"
        );
        let registered = set.image_registrations().unwrap();
        assert_eq!(registered[1].source, "/srv/deb");
        assert_eq!(
            set.image_defaults().unwrap().describe(),
            "default py; Slack T1: deb; Slack T1/C1: host"
        );

        for (args, says) in [
            (&["--image", "py"][..], "NAME=SOURCE"),
            (&["--default-image", "Py"][..], "not an image name"),
            (&["--slack-image", "T1=Py"][..], "Slack scope T1"),
            (&["--image-setup", "py"][..], "NAME=FILE"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(says), "{args:?}: {err}");
        }
        let twice = parse(&["--image", "py=/a", "--image", "py=/b"]).unwrap();
        let err = twice.image_registrations().unwrap_err().to_string();
        assert!(err.contains("registered twice"), "{err}");
    }

    #[test]
    fn network_flags_are_checked_when_read() {
        let default = parse(&[]).unwrap();
        assert_eq!(
            default.network_defaults().unwrap(),
            NetworkDefaults::default()
        );
        let set = parse(&[
            "--network",
            "networked:pypi.org",
            "--slack-network",
            "T1=restricted",
        ])
        .unwrap();
        assert_eq!(
            set.network_defaults().unwrap().describe(),
            "networked (allow: pypi.org); Slack T1: restricted"
        );
        let err = parse(&["--network", "networked:a.*.test"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("a.*.test"), "{err}");
        let err = parse(&["--slack-network", "T1=open"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("Slack scope T1"), "{err}");
    }

    #[test]
    fn the_disk_quota_is_a_size_or_none() {
        let default = parse(&[]).unwrap();
        assert_eq!(default.disk_quota_for(false), Some(DiskQuota::default()));
        // Rootless there is no quota to have unless asked for (and then the provider refuses).
        assert_eq!(default.disk_quota_for(true), None);
        let small = parse(&["--disk-quota", "500MiB", "--disk-files", "1000"]).unwrap();
        assert_eq!(
            small.disk_quota(),
            Some(DiskQuota {
                bytes: 500 << 20,
                inodes: 1000
            })
        );
        assert_eq!(parse(&["--disk-quota", "none"]).unwrap().disk_quota(), None);
        let too_small = parse(&["--disk-quota", "1MiB"]).err().unwrap().to_string();
        assert!(too_small.contains("too small"), "{too_small}");
        let garbage = parse(&["--disk-quota", "lots"]).err().unwrap().to_string();
        assert!(garbage.contains("not a size"), "{garbage}");
        let few_files = parse(&["--disk-files", "3"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            few_files.to_string().contains("--disk-files"),
            "{few_files}"
        );
    }

    #[test]
    fn checkpoint_limits_have_defaults_and_bounds() {
        let args = parse(&[]).unwrap();
        let retention = args.checkpoint_retention().unwrap();
        assert_eq!((retention.keep, retention.max_bytes), (20, 2 << 30));
        assert!(args.checkpoint_turns);
        let args = parse(&["--checkpoints-kept", "5", "--checkpoint-bytes", "100MiB"]).unwrap();
        assert_eq!(args.checkpoint_retention().unwrap().max_bytes, 100 << 20);
        assert!(parse(&["--checkpoints-kept", "0"]).is_err());
        assert!(parse(&["--checkpoints-kept", "101"]).is_err());
        assert!(parse(&["--checkpoint-bytes", "10"])
            .unwrap()
            .checkpoint_retention()
            .is_err());
        assert!(
            !parse(&["--checkpoint-turns", "false"])
                .unwrap()
                .checkpoint_turns
        );
    }

    #[test]
    fn the_warm_pool_size_is_bounded() {
        assert_eq!(parse(&["--warm-pool", "64"]).unwrap().warm_pool, Some(64));
        assert_eq!(parse(&[]).unwrap().warm_pool, None);
        let err = parse(&["--warm-pool", "65"]).unwrap_err().to_string();
        assert!(err.contains("0 to 64"), "{err}");
        assert!(parse(&["--warm-pool", "-1"]).is_err());
    }

    #[test]
    fn budget_flags_are_off_by_default_and_zero_is_off() {
        assert_eq!(parse(&[]).unwrap().budgets(), Budgets::default());
        let set = parse(&[
            "--thread-compute-budget",
            "3600",
            "--scope-compute-budget",
            "0",
            "--scope-creates-per-hour",
            "20",
            "--budget-check",
            "2s",
        ])
        .unwrap()
        .budgets();
        assert_eq!(set.thread_compute_per_day, Some(3600));
        assert_eq!(set.scope_compute_per_day, None);
        assert_eq!(set.scope_creates_per_hour, Some(20));
        assert_eq!(set.check_every, Duration::from_secs(10), "at least 10 s");
    }

    #[test]
    fn flags_parse_durations_and_keys() {
        let args = parse(&[
            "--port",
            "9000",
            "--idle-pause",
            "90s",
            "--retention",
            "1d",
            "--janitor-interval",
            "5s",
            "--api-keys-file",
            "/etc/threadbox/keys",
        ])
        .unwrap();
        assert_eq!(args.port, 9000);
        assert_eq!(args.idle_pause, Duration::from_secs(90));
        assert_eq!(args.retention, Duration::from_secs(86_400));
        assert_eq!(args.janitor_interval, Duration::from_secs(5));
        assert_eq!(
            args.api_keys_file.as_deref(),
            Some(Path::new("/etc/threadbox/keys"))
        );
        args.validate().unwrap();
    }

    #[test]
    fn keys_on_the_command_line_are_refused() {
        let args = parse(&["--api-keys", "a-key-that-ps-would-show"]).unwrap();
        let err = args.validate().unwrap_err().to_string();
        assert!(
            err.contains("shows in `ps`") && err.contains("THREADBOX_API_KEYS"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let err = parse(&["--idle-pause", "10"]).err().unwrap().to_string();
        assert!(err.contains("needs a unit"), "{err}");
        let args = parse(&["--idle-pause", "8d"]).unwrap();
        let err = args.validate().unwrap_err().to_string();
        assert!(err.contains("shorter than --retention (7d)"), "{err}");
        let args = parse(&["--janitor-interval", "100ms"]).unwrap();
        assert!(args.validate().is_err());
        let args = parse(&["--lease", "500ms"]).unwrap();
        assert!(args.validate().is_err());
    }
}
