//! The usecases `network` module's tests that need a real store (SQLite) and the test support
//! crate, which depend on the core and so cannot be its unit tests.

use std::time::Duration;

use threadbox_core::domain::*;
use threadbox_core::domain::{Allowlist, Cause, NetworkDefaults};
use threadbox_core::usecases::*;
use threadbox_core::usecases::{Config, ResolveOptions, UseCaseError};

mod support;
use support::{world_with, World};

fn world(default: NetworkProfile) -> World {
    world_with(Config {
        network: NetworkDefaults::new(default),
        settle_poll: Duration::from_millis(5),
        ..Config::default()
    })
}

fn listed() -> NetworkProfile {
    NetworkProfile::Networked {
        allow: Allowlist::parse(["pkg.test", "*.example.org"]).unwrap(),
    }
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

async fn resolve(
    w: &World,
    t: &str,
    network: Option<NetworkProfile>,
) -> Result<String, UseCaseError> {
    let handle =
        w.tb.resolve_with(
            &tid(t),
            ResolveOptions {
                network,
                ..ResolveOptions::default()
            },
        )
        .await?;
    Ok(handle.sandbox_id)
}

#[tokio::test]
async fn a_created_thread_gets_the_profile_it_asked_for_or_the_default() {
    let w = world(NetworkProfile::Restricted);
    let id = resolve(&w, "t1", Some(listed())).await.unwrap();
    assert_eq!(w.provider.network_of(&id), Some(listed()));
    assert_eq!(w.tb.load(&tid("t1")).await.unwrap().network, listed());

    let id = resolve(&w, "t2", None).await.unwrap();
    assert_eq!(w.provider.network_of(&id), Some(NetworkProfile::Restricted));

    let public = NetworkProfile::Networked {
        allow: Allowlist::everything_public(),
    };
    let w = world(public.clone());
    let id = resolve(&w, "t3", None).await.unwrap();
    assert_eq!(
        w.provider.network_of(&id),
        Some(public),
        "the default from config"
    );
}

#[tokio::test]
async fn a_new_slack_thread_gets_its_channels_or_workspaces_profile() {
    let mut w = world(NetworkProfile::Restricted);
    w.tb.config.network = NetworkDefaults::new(NetworkProfile::Restricted)
        .with_slack_setting("T1=networked:pkg.test,*.example.org;T1/C9=restricted")
        .unwrap();
    let in_team = resolve(&w, "slack:T1:C1:1767225600.000100", None)
        .await
        .unwrap();
    assert_eq!(w.provider.network_of(&in_team), Some(listed()));
    let in_channel = resolve(&w, "slack:T1:C9:1767225600.000100", None)
        .await
        .unwrap();
    assert_eq!(
        w.provider.network_of(&in_channel),
        Some(NetworkProfile::Restricted)
    );
    let api = resolve(&w, "api-thread", None).await.unwrap();
    assert_eq!(
        w.provider.network_of(&api),
        Some(NetworkProfile::Restricted)
    );
    // A caller's own choice still wins over the scope's.
    let asked = resolve(
        &w,
        "slack:T1:C1:1767225600.000200",
        Some(NetworkProfile::Restricted),
    )
    .await
    .unwrap();
    assert_eq!(
        w.provider.network_of(&asked),
        Some(NetworkProfile::Restricted)
    );
}

#[tokio::test]
async fn a_later_resolve_keeps_the_profile_and_refuses_another() {
    let w = world(NetworkProfile::Restricted);
    let id = resolve(&w, "t1", Some(listed())).await.unwrap();
    assert_eq!(resolve(&w, "t1", Some(listed())).await.unwrap(), id);
    assert_eq!(resolve(&w, "t1", None).await.unwrap(), id);
    let err = resolve(&w, "t1", Some(NetworkProfile::Restricted))
        .await
        .unwrap_err();
    assert!(matches!(err, UseCaseError::NetworkConflict { .. }), "{err}");
    assert_eq!(err.code(), "network_conflict");
    assert!(
        err.to_string().contains("PUT /v1/threads/t1/network"),
        "{err}"
    );
    assert_eq!(w.provider.creates(), 1);
}

#[tokio::test]
async fn a_change_is_recorded_with_a_user_event_and_reaches_the_next_sandbox() {
    let w = world(NetworkProfile::Restricted);
    let id = resolve(&w, "t1", None).await.unwrap();
    let change = w.tb.set_network(&tid("t1"), listed()).await.unwrap();
    assert_eq!(change.applied, NetworkApplied::NextSandbox);
    assert_eq!(change.session.network, listed());
    let stored = w.tb.load(&tid("t1")).await.unwrap();
    assert_eq!(stored.network, listed());
    assert_eq!(stored.sandbox_id.as_deref(), Some(id.as_str()));

    let events = w.tb.store.events_after(&tid("t1"), 0, 100).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.cause, Cause::User);
    assert_eq!((last.from, last.to), (Some(stored.status), stored.status));
    assert_eq!(
        last.detail.as_deref(),
        Some("network: networked (allow: pkg.test, *.example.org)")
    );
    assert_eq!(last.seq, stored.last_seq);
    // The running sandbox keeps what it was made with; a reset's sandbox gets the new one.
    assert_eq!(w.provider.network_of(&id), Some(NetworkProfile::Restricted));
    let fresh = w.tb.reset(&tid("t1")).await.unwrap();
    assert_eq!(w.provider.network_of(&fresh.sandbox_id), Some(listed()));

    let again = w.tb.set_network(&tid("t1"), listed()).await.unwrap();
    assert_eq!(again.applied, NetworkApplied::Unchanged);
    assert_eq!(
        again.session.version,
        w.tb.load(&tid("t1")).await.unwrap().version
    );
}

#[tokio::test]
async fn a_provider_that_can_changes_the_live_sandbox_in_place() {
    let w = world(NetworkProfile::Restricted);
    w.provider.support_live_network(true);
    let id = resolve(&w, "t1", None).await.unwrap();
    let change = w.tb.set_network(&tid("t1"), listed()).await.unwrap();
    assert_eq!(change.applied, NetworkApplied::Live);
    assert_eq!(w.provider.network_of(&id), Some(listed()));
}

#[tokio::test]
async fn an_unknown_thread_is_not_found() {
    let w = world(NetworkProfile::Restricted);
    let err = w.tb.set_network(&tid("nope"), listed()).await.unwrap_err();
    assert!(matches!(err, UseCaseError::UnknownThread(_)), "{err}");
}
