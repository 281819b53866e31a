//! What a networked sandbox trusts for TLS: the host's CA bundle, plus the deployment's egress
//! CA when the egress proxy intercepts hosts with credentials (see `intercept`), written into
//! the sandbox's own `/etc` (its root is generated, never the host's `/etc`), and the variables
//! that point tools with trust stores of their own (Python's requests, Node, curl) at it.
//!
//! Only certificates go in: the credentials never enter the sandbox.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// Inside a sandbox on the host's `/usr`: every CA it trusts, in one file (where Debian's
/// OpenSSL, curl and git look by default), and the deployment's egress CA alone (Node adds it
/// to its own roots).
pub(crate) const HOST_ROOT_TRUST: TrustPaths = TrustPaths {
    bundle: "/etc/ssl/certs/ca-certificates.crt",
    egress_ca: "/etc/ssl/certs/threadbox-egress-ca.pem",
};

/// Inside an image sandbox: the same files in a directory threadbox binds in, so the image's
/// own CA bundle stays its package manager's to update.
pub(crate) const IMAGE_ROOT_TRUST: TrustPaths = TrustPaths {
    bundle: "/run/threadbox/certs/ca-certificates.crt",
    egress_ca: "/run/threadbox/certs/threadbox-egress-ca.pem",
};

/// Where a sandbox's trust store is, inside it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TrustPaths {
    pub bundle: &'static str,
    pub egress_ca: &'static str,
}

impl TrustPaths {
    pub fn of(image_root: bool) -> Self {
        if image_root {
            IMAGE_ROOT_TRUST
        } else {
            HOST_ROOT_TRUST
        }
    }
}

/// Where hosts keep their CA bundle (Debian and derivatives, Fedora and derivatives, others).
const HOST_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Write the trust store under `root` (the host's view of where the sandbox's files go: its
/// root filesystem, or an image sandbox's managed directory) at `paths`.
pub(crate) fn write(root: &Path, paths: TrustPaths, egress_ca: Option<&str>) -> io::Result<()> {
    let dir = root.join(
        Path::new(paths.bundle)
            .parent()
            .and_then(|p| p.strip_prefix("/").ok())
            .expect("an absolute path in a directory"),
    );
    std::fs::create_dir_all(&dir)?;
    let mut bundle = HOST_BUNDLES
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default();
    if let Some(ca) = egress_ca {
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(
            "# threadbox egress CA: this deployment's proxy, for hosts it adds credentials to\n",
        );
        bundle.push_str(ca);
        write_inside(root, paths.egress_ca, ca)?;
    }
    write_inside(root, paths.bundle, &bundle)
}

fn write_inside(rootfs: &Path, path: &str, text: &str) -> io::Result<()> {
    let path = rootfs.join(path.trim_start_matches('/'));
    std::fs::write(&path, text)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
}

/// The variables that point tools at the trust store; `env` (the caller's) wins where it sets
/// one itself.
pub(crate) fn add_env(env: &mut BTreeMap<String, String>, paths: TrustPaths, egress_ca: bool) {
    let mut vars = vec![
        ("SSL_CERT_FILE", paths.bundle),
        ("REQUESTS_CA_BUNDLE", paths.bundle),
        ("CURL_CA_BUNDLE", paths.bundle),
    ];
    if egress_ca {
        vars.push(("NODE_EXTRA_CA_CERTS", paths.egress_ca));
    }
    for (name, value) in vars {
        env.entry(name.to_owned())
            .or_insert_with(|| value.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_holds_the_egress_ca_after_the_hosts() {
        let root = tempfile::tempdir().unwrap();
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        write(root.path(), HOST_ROOT_TRUST, Some(ca)).unwrap();
        let bundle =
            std::fs::read_to_string(root.path().join(&HOST_ROOT_TRUST.bundle[1..])).unwrap();
        assert!(bundle.ends_with(ca), "{bundle}");
        let alone =
            std::fs::read_to_string(root.path().join(&HOST_ROOT_TRUST.egress_ca[1..])).unwrap();
        assert_eq!(alone, ca);

        let plain = tempfile::tempdir().unwrap();
        write(plain.path(), IMAGE_ROOT_TRUST, None).unwrap();
        assert!(!plain.path().join(&IMAGE_ROOT_TRUST.egress_ca[1..]).exists());
        assert!(plain.path().join(&IMAGE_ROOT_TRUST.bundle[1..]).is_file());
    }

    #[test]
    fn the_callers_variables_win() {
        let mut env = BTreeMap::from([("SSL_CERT_FILE".to_owned(), "/mine.pem".to_owned())]);
        add_env(&mut env, HOST_ROOT_TRUST, true);
        assert_eq!(env["SSL_CERT_FILE"], "/mine.pem");
        assert_eq!(env["REQUESTS_CA_BUNDLE"], HOST_ROOT_TRUST.bundle);
        assert_eq!(env["NODE_EXTRA_CA_CERTS"], HOST_ROOT_TRUST.egress_ca);
        let mut plain = BTreeMap::new();
        add_env(&mut plain, IMAGE_ROOT_TRUST, false);
        assert_eq!(plain["SSL_CERT_FILE"], IMAGE_ROOT_TRUST.bundle);
        assert!(!plain.contains_key("NODE_EXTRA_CA_CERTS"));
    }
}
