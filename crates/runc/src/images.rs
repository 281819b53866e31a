//! The images this provider starts sandboxes from: `host` (the host's `/usr`), and each one the
//! operator registered (`RuncConfig::images`), unpacked into the store when the provider opens;
//! and the set-up step a new sandbox of an image runs before it is handed out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::image::{ImageSource, ImageStore};
use super::{RuncConfig, RuncProvider};
use threadbox_core::domain::{unknown_image, ImageInfo, ImageName, ImageSetup};
use threadbox_core::ports::{
    ExecCommand, ExecRequest, ExecResult, ProviderError, SandboxUser, DEFAULT_OUTPUT_CAP,
};

/// What the host image is, as `GET /v1/images` shows it.
const HOST_SOURCE: &str = "the host's /usr, read-only";

/// Output of a failed set-up shown in its error, from its end.
const SETUP_OUTPUT_SHOWN: usize = 4 * 1024;

pub(crate) struct RegisteredImages {
    by_name: BTreeMap<ImageName, Registered>,
}

pub(crate) struct Registered {
    pub info: ImageInfo,
    /// The unpacked root every sandbox of the image shares; `None` for the host image.
    pub rootfs: Option<PathBuf>,
    pub setup: Option<ImageSetup>,
}

impl RegisteredImages {
    /// Unpack (or find in the store) every registered image. Images need the host's root and a
    /// user namespace per sandbox (the image is seen through an idmapped mount made with it).
    pub async fn open(config: &RuncConfig, rootless: bool) -> Result<Self, ProviderError> {
        let mut by_name = BTreeMap::from([(
            ImageName::host(),
            Registered {
                info: ImageInfo::host(HOST_SOURCE),
                rootfs: None,
                setup: None,
            },
        )]);
        if config.images.is_empty() {
            return Ok(Self { by_name });
        }
        if rootless || !config.user_namespaces {
            return Err(ProviderError::Unsupported(format!(
                "images ({}) need threadbox run as root with user namespaces on: each sandbox sees \
                 the image through an idmapped mount of its own user namespace, under an overlay \
                 only root can mount; rootless, sandboxes start from the host's /usr alone",
                names(config)
            )));
        }
        let store_dir = config.images_dir();
        let store = tokio::task::spawn_blocking(move || ImageStore::open(store_dir))
            .await
            .map_err(|e| ProviderError::Internal(format!("image store panicked: {e}")))?
            .map_err(|e| ProviderError::Internal(e.to_string()))?;
        let store = std::sync::Arc::new(store);
        for registration in &config.images {
            let name = registration.name.clone();
            if name.is_host() {
                return Err(ProviderError::InvalidRequest(
                    "the image name \"host\" is the host's /usr; register the image under \
                     another name"
                        .into(),
                ));
            }
            if by_name.contains_key(&name) {
                return Err(ProviderError::InvalidRequest(format!(
                    "the image name {name:?} is registered twice"
                )));
            }
            let source = ImageSource::parse(&registration.source)
                .map_err(|e| ProviderError::InvalidRequest(format!("image {name}: {e}")))?;
            tracing::info!(image = %name, source = %source.display(), kind = source.kind.describe(),
                "registering image (unpacked once per digest; a new image takes a while)");
            let started = Instant::now();
            let store = store.clone();
            let stored = tokio::task::spawn_blocking(move || store.unpack(&source))
                .await
                .map_err(|e| ProviderError::Internal(format!("image unpack panicked: {e}")))?
                .map_err(|e| ProviderError::InvalidRequest(format!("image {name}: {e}")))?;
            tracing::info!(image = %name, digest = %stored.digest, bytes = stored.bytes,
                files = stored.files, setid_dropped = stored.setid_dropped,
                devices_skipped = stored.special_skipped,
                seconds = format!("{:.1}", started.elapsed().as_secs_f64()), "image ready");
            by_name.insert(
                name.clone(),
                Registered {
                    info: ImageInfo {
                        name,
                        digest: Some(stored.digest.clone()),
                        size_bytes: Some(stored.bytes),
                        source: stored.source.clone(),
                        setup: registration.setup.is_some(),
                    },
                    rootfs: Some(stored.rootfs.clone()),
                    setup: registration.setup.clone(),
                },
            );
        }
        Ok(Self { by_name })
    }

    /// `host` first, then the registered ones by name.
    pub fn list(&self) -> Vec<ImageInfo> {
        let host = self.by_name.values().filter(|r| r.info.name.is_host());
        let others = self.by_name.values().filter(|r| !r.info.name.is_host());
        host.chain(others).map(|r| r.info.clone()).collect()
    }

    pub fn get(&self, name: &ImageName) -> Result<&Registered, ProviderError> {
        self.by_name.get(name).ok_or_else(|| {
            ProviderError::InvalidRequest(unknown_image(name.as_str(), &self.list()))
        })
    }
}

fn names(config: &RuncConfig) -> String {
    let names: Vec<&str> = config.images.iter().map(|i| i.name.as_str()).collect();
    names.join(", ")
}

impl RuncProvider {
    /// The set-up step of a new sandbox of `image`: its files written, then its command run.
    /// Done through the sandbox's own commands, so every path resolves in the sandbox's view,
    /// as the user the step names. A failure names the step and carries its output.
    pub(crate) async fn run_setup(
        &self,
        sandbox_id: &str,
        image: &ImageName,
        setup: &ImageSetup,
    ) -> Result<(), ProviderError> {
        for (path, contents) in &setup.files {
            let user = if path.starts_with("/home/user/") {
                SandboxUser::User
            } else {
                SandboxUser::Root
            };
            let request = ExecRequest {
                command: ExecCommand::Argv(vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "mkdir -p -- \"$(dirname -- \"$1\")\" && cat > \"$1\"".into(),
                    "sh".into(),
                    path.clone(),
                ]),
                cwd: None,
                env: BTreeMap::new(),
                stdin: Some(contents.clone().into_bytes()),
                timeout: Duration::from_secs(30),
                output_cap: SETUP_OUTPUT_SHOWN,
                user,
            };
            let result = self.run_command(sandbox_id, request, None).await?;
            check_step(image, &format!("writing {path}"), &result, None)?;
        }
        if let Some(run) = &setup.run {
            let timeout = Duration::from_secs(setup.timeout_secs);
            let request = ExecRequest {
                command: ExecCommand::Shell(run.clone()),
                cwd: None,
                env: BTreeMap::new(),
                stdin: None,
                timeout,
                output_cap: DEFAULT_OUTPUT_CAP,
                user: setup.user,
            };
            let started = Instant::now();
            let result = self.run_command(sandbox_id, request, None).await?;
            check_step(image, "its command", &result, Some(timeout))?;
            tracing::info!(sandbox_id, image = %image, ms = started.elapsed().as_millis() as u64,
                "image set-up done");
        }
        Ok(())
    }
}

/// A set-up step that did not exit 0, as an error with the end of its output.
fn check_step(
    image: &ImageName,
    step: &str,
    result: &ExecResult,
    timeout: Option<Duration>,
) -> Result<(), ProviderError> {
    if result.exit_code == Some(0) && !result.timed_out {
        return Ok(());
    }
    let how = if result.timed_out {
        format!(
            "ran past its timeout of {}s",
            timeout.unwrap_or_default().as_secs()
        )
    } else if result.out_of_memory {
        "ran out of memory".to_owned()
    } else {
        match result.exit_code {
            Some(code) => format!("exited {code}"),
            None => "was killed".to_owned(),
        }
    };
    let mut output = format!("{}{}", result.stdout, result.stderr);
    if output.len() > SETUP_OUTPUT_SHOWN {
        let mut cut = output.len() - SETUP_OUTPUT_SHOWN;
        while !output.is_char_boundary(cut) {
            cut += 1;
        }
        output = format!("...{}", &output[cut..]);
    }
    Err(ProviderError::Internal(format!(
        "image {image}'s set-up failed: {step} {how}; its output:\n{}",
        output.trim_end()
    )))
}
