//! The deployment's egress CA: the certificate authority the egress proxy signs its own server
//! certificates with when it terminates TLS for a host with operator credentials (see
//! `intercept`), and that networked sandboxes trust (their bundle's CA file, see `network`).
//!
//! Made once per state directory and kept there (`egress-ca/ca.key` and `ca.crt`, owner-only)
//! so sandboxes keep trusting it across restarts of the provider; two providers that start at
//! once end up with the same one (the directory appears whole, by a rename). A server
//! certificate per host is minted on first use and cached.
//!
//! The CA's name is derived from its key, so the issuer can be rebuilt from the key alone
//! (parsing the certificate back would need an X.509 parser in the build).

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

/// Under the provider's state directory.
const CA_DIR: &str = "egress-ca";
const KEY_FILE: &str = "ca.key";
const CERT_FILE: &str = "ca.crt";
/// Server certificates kept at most; past that the cache starts over (a wildcard entry could
/// otherwise grow it with every name a sandbox makes up).
const MAX_CACHED_LEAVES: usize = 1024;

pub(crate) struct EgressCa {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl EgressCa {
    /// The state directory's CA, made now if it has none.
    pub fn load_or_create(state_dir: &Path, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let dir = state_dir.join(CA_DIR);
        if !dir.exists() {
            create(state_dir, &dir)?;
        }
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let (key_pem, cert_pem) = (read(KEY_FILE)?, read(CERT_FILE)?);
        let key = KeyPair::from_pem(&key_pem).map_err(|e| {
            format!(
                "{} is not a private key ({e}); move the directory away to make a new CA",
                dir.join(KEY_FILE).display()
            )
        })?;
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| {
            format!(
                "{} is not a certificate ({e}); move the directory away to make a new CA",
                dir.join(CERT_FILE).display()
            )
        })?;
        let issuer = Issuer::new(ca_params(&key), key);
        Ok(Self {
            cert_pem,
            cert_der,
            issuer,
            provider,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM: what a sandbox trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// TLS settings that present a certificate for `host` signed by this CA (with the CA in
    /// the chain), HTTP/1.1 only.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        if let Some(config) = self.leaves.lock().expect("poisoned").get(host) {
            return Ok(config.clone());
        }
        let key = KeyPair::generate().map_err(|e| format!("making a key for {host}: {e}"))?;
        let mut params = CertificateParams::new(vec![host.to_owned()])
            .map_err(|e| format!("{host} cannot be named in a certificate: {e}"))?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = date_time_ymd(2025, 1, 1);
        params.not_after = date_time_ymd(2125, 1, 1);
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("signing a certificate for {host}: {e}"))?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS settings: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone(), self.cert_der.clone()], key_der)
            .map_err(|e| format!("TLS settings for {host}: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut leaves = self.leaves.lock().expect("poisoned");
        if leaves.len() >= MAX_CACHED_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// The CA's settings, from its key alone (the name carries the key's identifier, so two
/// deployments' CAs never share a name).
fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut params = CertificateParams::default();
    let id: String = params
        .key_identifier(key)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "threadbox");
    name.push(DnType::CommonName, format!("threadbox egress CA {id}"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = date_time_ymd(2025, 1, 1);
    params.not_after = date_time_ymd(2125, 1, 1);
    params
}

/// Make a new CA in a directory of its own and move it to `dir` whole; if another process got
/// there first, theirs stays (and is used).
fn create(state_dir: &Path, dir: &Path) -> Result<(), String> {
    let key = KeyPair::generate().map_err(|e| format!("making the egress CA's key: {e}"))?;
    let cert = ca_params(&key)
        .self_signed(&key)
        .map_err(|e| format!("making the egress CA: {e}"))?;
    let tmp: PathBuf = state_dir.join(format!(
        "{CA_DIR}.tmp-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| -> io::Result<()> {
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
        for (name, text) in [(KEY_FILE, key.serialize_pem()), (CERT_FILE, cert.pem())] {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(tmp.join(name))?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, dir)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        if dir.join(CERT_FILE).exists() {
            return Ok(());
        }
        return Err(format!("writing the egress CA to {}: {e}", dir.display()));
    }
    tracing::info!(dir = %dir.display(), "egress CA created");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn the_ca_is_made_once_owner_only_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = EgressCa::load_or_create(dir.path(), provider()).unwrap();
        let again = EgressCa::load_or_create(dir.path(), provider()).unwrap();
        assert_eq!(first.cert_pem(), again.cert_pem());
        assert!(first.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        for name in [KEY_FILE, CERT_FILE] {
            let mode = std::fs::metadata(dir.path().join(CA_DIR).join(name))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        let leaf = again.server_config("pkg.test").unwrap();
        assert!(Arc::ptr_eq(
            &leaf,
            &again.server_config("pkg.test").unwrap()
        ));
        assert_eq!(leaf.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_damaged_ca_is_named() {
        let dir = tempfile::tempdir().unwrap();
        EgressCa::load_or_create(dir.path(), provider()).unwrap();
        std::fs::write(dir.path().join(CA_DIR).join(KEY_FILE), "not a key").unwrap();
        let err = EgressCa::load_or_create(dir.path(), provider())
            .err()
            .unwrap();
        assert!(err.contains("ca.key"), "{err}");
    }
}
