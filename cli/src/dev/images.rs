//! `threadbox dev`'s image flags: `--image NAME=SOURCE` (repeatable; `THREADBOX_IMAGES` as
//! `NAME=SOURCE,NAME=SOURCE`), `--image-setup NAME=FILE` (a JSON `ImageSetup`),
//! `--default-image NAME` and `--slack-image 'T1=NAME;T1/C1=NAME'`. Each value is checked when
//! the flags are read; how they go together (a set-up or a default naming an image nobody
//! registered, a name registered twice, `host` registered again) before anything starts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use threadbox_core::domain::{
    unknown_image, ImageDefaults, ImageInfo, ImageName, ImageSetup, HOST_IMAGE,
};
use threadbox_runc::ImageRegistration;

/// The largest set-up file read (its files' contents are inline: keep them small; an image's
/// own layers are where large files belong).
pub const MAX_SETUP_FILE: u64 = 1024 * 1024;

/// `--image NAME=SOURCE`: a valid name and a non-empty source (what the source holds is the
/// provider's to check when it unpacks it).
pub fn parse_image(raw: &str) -> Result<(ImageName, String), String> {
    let (name, source) = raw.split_once('=').ok_or_else(|| {
        format!("{raw:?}: expected NAME=SOURCE (an OCI layout, archive or root filesystem)")
    })?;
    let name = ImageName::parse(name.trim())?;
    let source = source.trim();
    if source.is_empty() {
        return Err(format!("{raw:?}: image {name} names no source"));
    }
    Ok((name, source.to_owned()))
}

/// `--image-setup NAME=FILE`.
pub fn parse_image_setup(raw: &str) -> Result<(ImageName, PathBuf), String> {
    let (name, file) = raw
        .split_once('=')
        .ok_or_else(|| format!("{raw:?}: expected NAME=FILE (a JSON set-up step)"))?;
    let name = ImageName::parse(name.trim())?;
    if file.trim().is_empty() {
        return Err(format!("{raw:?}: image {name} names no file"));
    }
    Ok((name, PathBuf::from(file.trim())))
}

pub fn parse_image_name(raw: &str) -> Result<ImageName, String> {
    ImageName::parse(raw.trim())
}

/// `--slack-image`: checked when read, kept as written.
pub fn parse_slack_image(raw: &str) -> Result<String, String> {
    ImageDefaults::default()
        .with_slack_setting(raw)
        .map(|_| raw.to_owned())
        .map_err(|e| e.to_string())
}

/// The registrations the flags make, set-up files read: refused when a name is registered twice,
/// `host` is registered, or a set-up names an image not registered (or is given twice).
pub fn registrations(
    images: &[(ImageName, String)],
    setups: &[(ImageName, PathBuf)],
) -> anyhow::Result<Vec<ImageRegistration>> {
    let mut seen = BTreeSet::new();
    for (name, source) in images {
        if name.is_host() {
            bail!(
                "--image {name}={source}: `{HOST_IMAGE}` is the host's own image and always \
                 there; register this one under another name"
            );
        }
        if !seen.insert(name) {
            bail!("--image: {name} is registered twice");
        }
    }
    let mut set_up = BTreeSet::new();
    for (name, file) in setups {
        if !seen.contains(name) {
            bail!(
                "--image-setup {name}={}: no --image registers \"{name}\" (registered: {})",
                file.display(),
                names(images)
            );
        }
        if !set_up.insert(name) {
            bail!("--image-setup: {name} is given twice");
        }
    }
    images
        .iter()
        .map(|(name, source)| {
            let setup = setups
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, file)| read_setup(file))
                .transpose()?;
            Ok(ImageRegistration {
                name: name.clone(),
                source: source.clone(),
                setup,
            })
        })
        .collect()
}

fn names(images: &[(ImageName, String)]) -> String {
    let mut all = vec![HOST_IMAGE.to_owned()];
    all.extend(images.iter().map(|(n, _)| n.to_string()));
    all.join(", ")
}

/// Read and check one set-up file; errors name the file and the field.
pub fn read_setup(file: &Path) -> anyhow::Result<ImageSetup> {
    let shown = file.display();
    let size = std::fs::metadata(file)
        .with_context(|| format!("--image-setup: reading {shown}"))?
        .len();
    if size > MAX_SETUP_FILE {
        bail!(
            "--image-setup: {shown} is {size} bytes; a set-up file may be at most {MAX_SETUP_FILE}"
        );
    }
    let text =
        std::fs::read_to_string(file).with_context(|| format!("--image-setup: reading {shown}"))?;
    let mut json = serde_json::Deserializer::from_str(&text);
    let setup: ImageSetup = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        if field == "." {
            anyhow::anyhow!("--image-setup: {shown}: {inner}")
        } else {
            anyhow::anyhow!("--image-setup: {shown}: field `{field}`: {inner}")
        }
    })?;
    for path in setup.files.keys() {
        let bad = !path.starts_with('/')
            || path.split('/').any(|part| part == "..")
            || path.contains('\0')
            || path.ends_with('/');
        if bad {
            bail!(
                "--image-setup: {shown}: field `files`: {path:?} must be an absolute file path \
                 inside the sandbox, without '..'"
            );
        }
    }
    if setup.timeout_secs == 0 {
        bail!("--image-setup: {shown}: field `timeout_secs`: must be at least 1");
    }
    if setup.run.as_deref().is_some_and(|r| r.trim().is_empty()) {
        bail!("--image-setup: {shown}: field `run`: an empty command (leave it out for none)");
    }
    Ok(setup)
}

/// What runc will list for `registrations` once it has unpacked them (digests and sizes come
/// then): enough to check the defaults before the unpacking, which may take a while.
pub fn as_listed(registrations: &[ImageRegistration]) -> Vec<ImageInfo> {
    let mut images = vec![ImageInfo::host("runc")];
    images.extend(registrations.iter().map(|r| ImageInfo {
        name: r.name.clone(),
        digest: None,
        size_bytes: None,
        source: r.source.clone(),
        setup: r.setup.is_some(),
    }));
    images
}

/// Refuse defaults naming an image the provider does not have (checked once it is open, so a
/// runc image that failed to unpack, or an E2B name with no template, is caught at start).
pub fn check_defaults(defaults: &ImageDefaults, registered: &[ImageInfo]) -> anyhow::Result<()> {
    for image in defaults.images() {
        if !registered.iter().any(|i| &i.name == image) {
            let which = if image == &defaults.default {
                "--default-image"
            } else {
                "--slack-image"
            };
            bail!("{which}: {}", unknown_image(image.as_str(), registered));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> ImageName {
        ImageName::parse(n).unwrap()
    }

    #[test]
    fn flags_read_their_values_and_name_what_is_wrong() {
        assert_eq!(
            parse_image("py=/srv/py.tar").unwrap(),
            (name("py"), "/srv/py.tar".to_owned())
        );
        assert!(parse_image("py").unwrap_err().contains("NAME=SOURCE"));
        assert!(parse_image("Py=/x")
            .unwrap_err()
            .contains("not an image name"));
        assert!(parse_image("py=").unwrap_err().contains("names no source"));
        assert_eq!(
            parse_image_setup("py=setup.json").unwrap(),
            (name("py"), PathBuf::from("setup.json"))
        );
        assert!(parse_image_setup("py=")
            .unwrap_err()
            .contains("names no file"));
        assert!(parse_slack_image("T1=Py")
            .unwrap_err()
            .contains("Slack scope T1"));
    }

    #[test]
    fn registrations_refuse_duplicates_host_and_setups_of_nothing() {
        let images = vec![
            (name("py"), "/a".to_owned()),
            (name("node"), "/b".to_owned()),
        ];
        let regs = registrations(&images, &[]).unwrap();
        assert_eq!(regs.len(), 2);
        assert_eq!(regs[1].name, name("node"));
        assert_eq!(regs[1].setup, None);

        let twice = vec![(name("py"), "/a".to_owned()), (name("py"), "/b".to_owned())];
        let err = registrations(&twice, &[]).unwrap_err().to_string();
        assert!(err.contains("py is registered twice"), "{err}");
        let host = vec![(name("host"), "/a".to_owned())];
        let err = registrations(&host, &[]).unwrap_err().to_string();
        assert!(err.contains("`host` is the host's own image"), "{err}");
        let err = registrations(&images, &[(name("ruby"), "s.json".into())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no --image registers \"ruby\""), "{err}");
        assert!(err.contains("registered: host, py, node"), "{err}");
    }

    #[test]
    fn setup_files_are_read_and_their_errors_name_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let write = |file: &str, text: &str| {
            let path = dir.path().join(file);
            std::fs::write(&path, text).unwrap();
            path
        };
        let good = write(
            "good.json",
            r#"{"files": {"/home/user/.bashrc": "export A=1\n"}, "run": "apt-get install -y jq", "timeout_secs": 60}"#,
        );
        let images = vec![(name("py"), "/a".to_owned())];
        let regs = registrations(&images, &[(name("py"), good)]).unwrap();
        let setup = regs[0].setup.clone().unwrap();
        assert_eq!(setup.run.as_deref(), Some("apt-get install -y jq"));
        assert_eq!(setup.timeout_secs, 60);
        assert_eq!(setup.user, threadbox_core::ports::SandboxUser::Root);

        let cases = [
            (
                "type.json",
                r#"{"timeout_secs": "soon"}"#,
                "field `timeout_secs`: invalid type",
            ),
            (
                "unknown.json",
                r#"{"command": "x"}"#,
                "unknown field `command`",
            ),
            ("user.json", r#"{"user": "admin"}"#, "field `user`"),
            (
                "rel.json",
                r#"{"files": {"etc/x": ""}}"#,
                "field `files`: \"etc/x\"",
            ),
            (
                "dots.json",
                r#"{"files": {"/home/../etc/x": ""}}"#,
                "without '..'",
            ),
            (
                "zero.json",
                r#"{"timeout_secs": 0}"#,
                "field `timeout_secs`: must be at least 1",
            ),
            ("empty.json", r#"{"run": "  "}"#, "field `run`"),
            ("broken.json", "{", "broken.json"),
        ];
        for (file, text, expected) in cases {
            let path = write(file, text);
            let err = format!("{:#}", read_setup(&path).unwrap_err());
            assert!(err.contains(file), "{file}: {err}");
            assert!(err.contains(expected), "{file}: {err}");
        }
        let missing = format!(
            "{:#}",
            read_setup(&dir.path().join("nope.json")).unwrap_err()
        );
        assert!(missing.contains("nope.json"), "{missing}");
    }

    #[test]
    fn defaults_must_name_registered_images() {
        let registered = vec![
            ImageInfo::host("runc"),
            ImageInfo {
                name: name("py"),
                ..ImageInfo::host("x")
            },
        ];
        check_defaults(&ImageDefaults::new(name("py")), &registered).unwrap();
        let err = check_defaults(&ImageDefaults::new(name("ruby")), &registered)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--default-image: no image is registered as \"ruby\"; this deployment has: host, py"
        );
        let scoped = ImageDefaults::default()
            .with_slack_setting("T1=ruby")
            .unwrap();
        let err = check_defaults(&scoped, &registered)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--slack-image: "), "{err}");
    }
}
