//! Images: what a thread's sandboxes start from, by the name an operator registered it under.
//! The names are the operator's (`threadbox dev --image NAME=SOURCE`, on AWS a parameter mapping
//! names to E2B template ids); what a name stands for is the provider's business (an unpacked
//! OCI image on runc, a template on E2B). `host` is always there: on runc the host's own `/usr`,
//! on E2B the deployment's template.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The image every provider has and the default unless the operator names another.
pub const HOST_IMAGE: &str = "host";

/// The longest image name.
pub const MAX_IMAGE_NAME_LEN: usize = 63;

/// An image's registered name: 1 to 63 of `a-z`, `0-9`, `.`, `_` and `-`, starting with a
/// letter or digit (a name fits a path segment, a Slack command and a DynamoDB attribute).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ImageName(String);

impl ImageName {
    pub fn parse(name: &str) -> Result<Self, String> {
        let valid_start = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let valid_rest = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
        if name.len() > MAX_IMAGE_NAME_LEN || !valid_start || !valid_rest {
            return Err(format!(
                "{name:?} is not an image name: 1 to {MAX_IMAGE_NAME_LEN} of a-z, 0-9, '.', '_' \
                 and '-', starting with a letter or digit"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The host image ([`HOST_IMAGE`]).
    pub fn host() -> Self {
        Self(HOST_IMAGE.to_owned())
    }

    pub fn is_host(&self) -> bool {
        self.0 == HOST_IMAGE
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for ImageName {
    fn default() -> Self {
        Self::host()
    }
}

impl fmt::Display for ImageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ImageName {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Self::parse(&name)
    }
}

impl From<ImageName> for String {
    fn from(name: ImageName) -> String {
        name.0
    }
}

/// One registered image as a provider lists it (`GET /v1/images`, `threadbox images`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    pub name: ImageName,
    /// What the image is known by: an OCI manifest's digest (`sha256:...`), a tarball's or a
    /// directory's, or the E2B template id; `None` for the host image on runc.
    pub digest: Option<String>,
    /// Bytes its unpacked files take (counted once, however many sandboxes use it).
    pub size_bytes: Option<u64>,
    /// Where it came from, as the operator named it (a path, `e2b template ...`, `host /usr`).
    pub source: String,
    /// Whether new sandboxes of it run a setup step before their first command.
    #[serde(default)]
    pub setup: bool,
}

impl ImageInfo {
    /// The host image as a provider without registered images lists it.
    pub fn host(source: &str) -> Self {
        Self {
            name: ImageName::host(),
            digest: None,
            size_bytes: None,
            source: source.to_owned(),
            setup: false,
        }
    }
}

/// Who a command runs as inside its sandbox. `User` is uid 1000 with no capabilities; `Root` is
/// uid 0 of the sandbox's own user namespace, with the capabilities a container's root has over
/// what that namespace owns (installing packages into an image's root, for one) and none over
/// the host. E2B's SDKs name the same two (`user: "root"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxUser {
    #[default]
    User,
    Root,
}

impl SandboxUser {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Root => "root",
        }
    }
}

/// The longest a setup step's command may run unless its registration says otherwise.
pub const DEFAULT_SETUP_TIMEOUT_SECS: u64 = 300;

/// What a new sandbox of an image gets before its first command (and a warm pool member before
/// it is ready): files written, then one command run. Its failure fails the create, with the
/// command's output. The operator writes it as JSON beside the image's registration
/// (`threadbox dev --image-setup NAME=FILE`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSetup {
    /// Absolute path inside the sandbox -> contents (UTF-8). Under `/home/user` a file is the
    /// user's; elsewhere root's.
    #[serde(default)]
    pub files: std::collections::BTreeMap<String, String>,
    /// A shell command, run after the files are written.
    #[serde(default)]
    pub run: Option<String>,
    /// Who runs it: `root` unless it says `user` (an image's set-up usually installs).
    #[serde(default = "root_user")]
    pub user: SandboxUser,
    /// Seconds the command may take; past it the create fails.
    #[serde(default = "default_setup_timeout")]
    pub timeout_secs: u64,
}

fn root_user() -> SandboxUser {
    SandboxUser::Root
}

fn default_setup_timeout() -> u64 {
    DEFAULT_SETUP_TIMEOUT_SECS
}

/// The error for a name no image is registered under, naming those that are.
pub fn unknown_image(name: &str, registered: &[ImageInfo]) -> String {
    let names: Vec<&str> = registered.iter().map(|i| i.name.as_str()).collect();
    format!(
        "no image is registered as {name:?}; this deployment has: {}",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_host_is_the_default() {
        assert_eq!(ImageName::default().as_str(), "host");
        assert!(ImageName::default().is_host());
        for good in ["debian", "py3.12", "a", "team_a-tools", &"a".repeat(63)] {
            assert!(ImageName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "Debian", "-x", ".x", "a/b", "a b", "é", &"a".repeat(64)] {
            let err = ImageName::parse(bad).unwrap_err();
            assert!(err.contains("not an image name"), "{err}");
        }
        let json: Result<ImageName, _> = serde_json::from_str("\"../etc\"");
        assert!(json.is_err());
        assert_eq!(
            serde_json::to_string(&ImageName::host()).unwrap(),
            "\"host\""
        );
    }

    #[test]
    fn an_unknown_name_lists_the_registered_ones() {
        let msg = unknown_image("nope", &[ImageInfo::host("host /usr")]);
        assert!(msg.contains("\"nope\"") && msg.ends_with("host"), "{msg}");
    }
}
