//! What a networked sandbox trusts for TLS: the host's CA bundle, plus the deployment's egress
//! CA when the egress proxy intercepts hosts with credentials (see `intercept`), written into
//! the sandbox's own `/etc` (its root is generated, never the host's `/etc`), and the variables
//! that point tools with trust stores of their own (Python's requests, Node, curl) at it.
//!
//! Only certificates go in: the credentials never enter the sandbox.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// Inside the sandbox: every CA it trusts, in one file (where Debian's OpenSSL, curl and git
/// look by default).
pub(crate) const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Inside the sandbox: the deployment's egress CA alone (Node adds it to its own roots).
pub(crate) const EGRESS_CA: &str = "/etc/ssl/certs/threadbox-egress-ca.pem";

/// Where hosts keep their CA bundle (Debian and derivatives, Fedora and derivatives, others).
const HOST_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Write the trust store into a bundle's root filesystem (`rootfs`, seen as `/` inside).
pub(crate) fn write(rootfs: &Path, egress_ca: Option<&str>) -> io::Result<()> {
    let dir = rootfs.join(
        Path::new(CA_BUNDLE)
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
        write_inside(rootfs, EGRESS_CA, ca)?;
    }
    write_inside(rootfs, CA_BUNDLE, &bundle)
}

fn write_inside(rootfs: &Path, path: &str, text: &str) -> io::Result<()> {
    let path = rootfs.join(path.trim_start_matches('/'));
    std::fs::write(&path, text)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
}

/// The variables that point tools at the trust store; `env` (the caller's) wins where it sets
/// one itself.
pub(crate) fn add_env(env: &mut BTreeMap<String, String>, egress_ca: bool) {
    let mut vars = vec![
        ("SSL_CERT_FILE", CA_BUNDLE),
        ("REQUESTS_CA_BUNDLE", CA_BUNDLE),
        ("CURL_CA_BUNDLE", CA_BUNDLE),
    ];
    if egress_ca {
        vars.push(("NODE_EXTRA_CA_CERTS", EGRESS_CA));
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
        write(root.path(), Some(ca)).unwrap();
        let bundle = std::fs::read_to_string(root.path().join(&CA_BUNDLE[1..])).unwrap();
        assert!(bundle.ends_with(ca), "{bundle}");
        let alone = std::fs::read_to_string(root.path().join(&EGRESS_CA[1..])).unwrap();
        assert_eq!(alone, ca);

        let plain = tempfile::tempdir().unwrap();
        write(plain.path(), None).unwrap();
        assert!(!plain.path().join(&EGRESS_CA[1..]).exists());
    }

    #[test]
    fn the_callers_variables_win() {
        let mut env = BTreeMap::from([("SSL_CERT_FILE".to_owned(), "/mine.pem".to_owned())]);
        add_env(&mut env, true);
        assert_eq!(env["SSL_CERT_FILE"], "/mine.pem");
        assert_eq!(env["REQUESTS_CA_BUNDLE"], CA_BUNDLE);
        assert_eq!(env["NODE_EXTRA_CA_CERTS"], EGRESS_CA);
        let mut plain = BTreeMap::new();
        add_env(&mut plain, false);
        assert!(!plain.contains_key("NODE_EXTRA_CA_CERTS"));
    }
}
