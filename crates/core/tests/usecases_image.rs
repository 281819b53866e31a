//! The usecases `image` module and the image choice in `resolve`, over a real store (SQLite) and
//! the in-memory provider with registered images.

use std::time::Duration;

use threadbox_core::domain::{Cause, ImageDefaults, ImageName, NetworkProfile, ThreadId};
use threadbox_core::usecases::{Config, ImageApplied, ResolveOptions, UseCaseError};

mod support;
use support::{world_with, World};

fn world(default: &str) -> World {
    let w = world_with(Config {
        images: ImageDefaults::new(image(default)),
        settle_poll: Duration::from_millis(5),
        ..Config::default()
    });
    w.provider.register_image("python");
    w.provider.register_image("node");
    w
}

fn image(name: &str) -> ImageName {
    ImageName::parse(name).unwrap()
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

async fn resolve(w: &World, t: &str, image: Option<&str>) -> Result<String, UseCaseError> {
    let handle =
        w.tb.resolve_with(
            &tid(t),
            ResolveOptions {
                image: image.map(self::image),
                ..ResolveOptions::default()
            },
        )
        .await?;
    Ok(handle.sandbox_id)
}

#[tokio::test]
async fn a_created_thread_gets_the_image_it_asked_for_or_the_default() {
    let w = world("host");
    let id = resolve(&w, "t1", Some("python")).await.unwrap();
    assert_eq!(w.provider.image_of(&id), Some(image("python")));
    assert_eq!(w.tb.load(&tid("t1")).await.unwrap().image, image("python"));

    let id = resolve(&w, "t2", None).await.unwrap();
    assert_eq!(w.provider.image_of(&id), Some(ImageName::host()));

    let w = world("node");
    let id = resolve(&w, "t3", None).await.unwrap();
    assert_eq!(
        w.provider.image_of(&id),
        Some(image("node")),
        "--default-image"
    );
}

#[tokio::test]
async fn a_new_slack_thread_gets_its_channels_or_workspaces_image() {
    let mut w = world("host");
    w.tb.config.images = ImageDefaults::new(ImageName::host())
        .with_slack_setting("T1=python;T1/C9=node")
        .unwrap();
    let of = |id: String| w.provider.image_of(&id).unwrap().to_string();
    let team = resolve(&w, "slack:T1:C1:1767225600.000100", None).await;
    assert_eq!(of(team.unwrap()), "python");
    let channel = resolve(&w, "slack:T1:C9:1767225600.000100", None).await;
    assert_eq!(of(channel.unwrap()), "node");
    let other = resolve(&w, "slack:T2:C1:1767225600.000100", None).await;
    assert_eq!(of(other.unwrap()), "host");
    // The caller's own choice wins over the scope's.
    let asked = resolve(&w, "slack:T1:C1:1767225600.000200", Some("host")).await;
    assert_eq!(of(asked.unwrap()), "host");
}

#[tokio::test]
async fn an_unknown_image_is_refused_naming_the_registered_ones_and_writes_nothing() {
    let w = world("host");
    let err = resolve(&w, "t1", Some("ruby")).await.unwrap_err();
    assert!(matches!(err, UseCaseError::UnknownImage(_)), "{err}");
    assert_eq!(err.code(), "unknown_image");
    assert!(!err.is_retryable());
    assert_eq!(
        err.to_string(),
        "no image is registered as \"ruby\"; this deployment has: host, python, node"
    );
    assert_eq!(w.provider.creates(), 0);
    assert!(w.tb.store.load(&tid("t1")).await.unwrap().is_none());

    resolve(&w, "t1", None).await.unwrap();
    let err = w.tb.set_image(&tid("t1"), image("ruby")).await.unwrap_err();
    assert_eq!(err.code(), "unknown_image");
    assert!(w.tb.load(&tid("t1")).await.unwrap().image.is_host());
}

#[tokio::test]
async fn a_later_resolve_keeps_the_image_and_refuses_another() {
    let w = world("host");
    let id = resolve(&w, "t1", Some("python")).await.unwrap();
    assert_eq!(resolve(&w, "t1", Some("python")).await.unwrap(), id);
    assert_eq!(resolve(&w, "t1", None).await.unwrap(), id);
    let err = resolve(&w, "t1", Some("node")).await.unwrap_err();
    assert!(matches!(err, UseCaseError::ImageConflict { .. }), "{err}");
    assert_eq!(err.code(), "image_conflict");
    let message = err.to_string();
    assert!(
        message.contains("already has the image python"),
        "{message}"
    );
    assert!(message.contains("PUT /v1/threads/t1/image"), "{message}");
    assert_eq!(w.provider.creates(), 1);
}

#[tokio::test]
async fn a_change_is_recorded_with_a_user_event_and_reaches_the_next_sandbox() {
    let w = world("host");
    let id = resolve(&w, "t1", None).await.unwrap();
    let change = w.tb.set_image(&tid("t1"), image("python")).await.unwrap();
    assert_eq!(change.applied, ImageApplied::NextSandbox);
    assert_eq!(change.session.image, image("python"));
    let stored = w.tb.load(&tid("t1")).await.unwrap();
    assert_eq!(stored.image, image("python"));
    assert_eq!(stored.sandbox_id.as_deref(), Some(id.as_str()));

    let events = w.tb.store.events_after(&tid("t1"), 0, 100).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.cause, Cause::User);
    assert_eq!((last.from, last.to), (Some(stored.status), stored.status));
    assert_eq!(last.detail.as_deref(), Some("image: python (from host)"));

    // The sandbox it has keeps its image; a reset's starts from the new one, and so does a
    // recreate after the provider lost it.
    assert_eq!(w.provider.image_of(&id), Some(ImageName::host()));
    let fresh = w.tb.reset(&tid("t1")).await.unwrap();
    assert_eq!(
        w.provider.image_of(&fresh.sandbox_id),
        Some(image("python"))
    );
    w.tb.set_image(&tid("t1"), image("node")).await.unwrap();
    w.provider.forget(&fresh.sandbox_id);
    w.tb.pause(&tid("t1")).await.ok();
    let again = w.tb.resolve(&tid("t1")).await.unwrap();
    assert_ne!(again.sandbox_id, fresh.sandbox_id, "a replacement");
    assert_eq!(w.provider.image_of(&again.sandbox_id), Some(image("node")));

    let same = w.tb.set_image(&tid("t1"), image("node")).await.unwrap();
    assert_eq!(same.applied, ImageApplied::Unchanged);
    assert_eq!(
        same.session.version,
        w.tb.load(&tid("t1")).await.unwrap().version
    );
}

#[tokio::test]
async fn a_fork_starts_from_its_sources_image() {
    let w = world("host");
    resolve(&w, "src", Some("python")).await.unwrap();
    let fork =
        w.tb.fork(threadbox_core::usecases::ForkRequest {
            source: tid("src"),
            thread: tid("forked"),
            checkpoint: None,
            network: None,
        })
        .await
        .unwrap();
    assert_eq!(w.provider.image_of(&fork.sandbox_id), Some(image("python")));
    assert_eq!(
        w.tb.load(&tid("forked")).await.unwrap().image,
        image("python")
    );
    assert_eq!(
        w.tb.load(&tid("forked")).await.unwrap().network,
        NetworkProfile::Restricted
    );
}

#[tokio::test]
async fn an_unknown_thread_is_not_found() {
    let w = world("host");
    let err =
        w.tb.set_image(&tid("nope"), image("python"))
            .await
            .unwrap_err();
    assert!(matches!(err, UseCaseError::UnknownThread(_)), "{err}");
}
