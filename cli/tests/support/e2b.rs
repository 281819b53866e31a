//! `threadbox dev` on E2B, here the E2B contract fake on 127.0.0.1 (`threadbox_testing::
//! e2b_fake`, which runs commands for real in a user namespace of their own).

use threadbox_testing::e2b_fake::E2bFake;

use super::{find_program, DevServer};

/// What the E2B fake needs of the machine: `unshare` (and user namespaces or root).
pub fn e2b_missing() -> Vec<String> {
    find_program("unshare")
        .is_none()
        .then(|| "unshare (util-linux), for the E2B fake".to_owned())
        .into_iter()
        .collect()
}

/// `threadbox dev` with `args`, its provider E2B at `fake`; checked on its banner.
pub async fn start_on_e2b(fake: &E2bFake, args: &[&str]) -> DevServer {
    let vars: Vec<(String, String)> = fake.env_vars().into_iter().collect();
    let mut env: Vec<(&str, Option<&str>)> = vars
        .iter()
        .map(|(k, v)| (k.as_str(), Some(v.as_str())))
        .collect();
    env.push(("THREADBOX_PROVIDER", Some("e2b")));
    let dev = DevServer::start_with_env(args, &env).await;
    let banner = dev.stdout_lines();
    assert!(
        banner.iter().any(|l| l.contains("provider   e2b (")),
        "not on E2B: {banner:#?}"
    );
    dev
}
