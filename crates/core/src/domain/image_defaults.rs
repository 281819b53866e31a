//! Which image a new thread starts from when its creator names none: the operator's default
//! (`--default-image`, else `host`), overridden per Slack workspace and per Slack channel
//! (`--slack-image`), the way `network_defaults` chooses network profiles. Read from the thread
//! id alone, so every path that creates a thread agrees.
//!
//! Per Slack scope, written compactly for a flag or an environment variable:
//! `T0123=python;T0123/C0456=node-22` (a workspace, or a workspace's channel; the channel wins).

use super::image::ImageName;
use super::slack_scoped::{SlackScoped, MAX_SLACK_SCOPES};

/// The most Slack scopes one setting may name.
pub const MAX_IMAGE_SCOPES: usize = MAX_SLACK_SCOPES;

/// A setting that could not be read; says which part and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ImageSettingError(String);

/// The images new threads get: the default, and per Slack scope (`SlackScoped`'s
/// `for_thread`, `for_scope`, `scopes`).
pub type ImageDefaults = SlackScoped<ImageName>;

impl SlackScoped<ImageName> {
    /// Add the per-scope setting (`T1=IMAGE;T1/C1=IMAGE`); an empty one adds nothing.
    pub fn with_slack_setting(self, setting: &str) -> Result<Self, ImageSettingError> {
        self.with_setting(setting, "IMAGE", |value| ImageName::parse(value.trim()))
            .map_err(ImageSettingError)
    }

    /// Every image these defaults name (the default first), to check against what the provider
    /// has registered.
    pub fn images(&self) -> Vec<&ImageName> {
        self.distinct()
    }

    /// One line: `default host; Slack T1: python`.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("default {}", self.default)];
        parts.extend(
            self.overrides()
                .map(|(scope, image)| format!("Slack {scope}: {image}")),
        );
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ThreadId;

    fn thread(id: &str) -> ThreadId {
        ThreadId::parse(id).unwrap()
    }

    fn image(name: &str) -> ImageName {
        ImageName::parse(name).unwrap()
    }

    #[test]
    fn a_channel_beats_its_workspace_which_beats_the_default() {
        let defaults = ImageDefaults::new(image("base"))
            .with_slack_setting("T1=python; T1/C9=node-22;T2=host")
            .unwrap();
        let of = |id: &str| defaults.for_thread(&thread(id)).to_string();
        assert_eq!(of("slack:T1:C1:1767225600.000100"), "python");
        assert_eq!(of("slack:T1:D1"), "python");
        assert_eq!(of("slack:T1:C9:1767225600.000100"), "node-22");
        assert_eq!(of("slack:T2:C9:1767225600.000100"), "host");
        assert_eq!(of("slack:T3:C1:1767225600.000100"), "base");
        assert_eq!(of("api-thread-1"), "base");
        assert_eq!(defaults.for_scope("T1/C2").as_str(), "python");
        assert_eq!(
            defaults.images(),
            vec![
                &image("base"),
                &image("python"),
                &image("node-22"),
                &image("host")
            ]
        );
        assert_eq!(
            defaults.describe(),
            "default base; Slack T1: python; Slack T1/C9: node-22; Slack T2: host"
        );
        assert_eq!(ImageDefaults::default().default, ImageName::host());
    }

    #[test]
    fn bad_scope_settings_name_the_scope() {
        let base = ImageDefaults::default();
        let cases = [
            ("T1", "expected TEAM=IMAGE"),
            (
                "T1=Python",
                "Slack scope T1: \"Python\" is not an image name",
            ),
            ("T1=", "Slack scope T1: \"\" is not an image name"),
            ("T-1=host", "Slack scope \"T-1\""),
            ("T1=host;T1=python", "named twice"),
        ];
        for (setting, expected) in cases {
            let err = base
                .clone()
                .with_slack_setting(setting)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{setting}: {err}");
        }
        assert_eq!(base.clone().with_slack_setting(" ; ").unwrap(), base);
    }
}
