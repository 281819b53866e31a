//! Images on E2B: each name an operator maps to a template (`THREADBOX_E2B_TEMPLATES`, `host`
//! being `E2B_TEMPLATE`), listed by the provider and sent as the create's `templateID`, which
//! the contract fake checks exists. Through the use cases, the warm pool keeps members per
//! image: a thread on an image gets a member of that template, never one of `host`'s.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::config::Env;
use threadbox_core::domain::{ImageDefaults, ImageName, ThreadId};
use threadbox_core::ports::{ProviderError, SandboxProvider};
use threadbox_core::usecases::{ResolveOptions, SweepOptions, Threadbox, WarmPool};
use threadbox_e2b::{E2bConfig, E2bProvider, TEMPLATES_VAR};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::e2b_fake::{E2bFake, FakeOptions};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::provider_conformance::{create_request, fresh_owner};
use threadbox_testing::ManualClock;

fn name(n: &str) -> ImageName {
    ImageName::parse(n).unwrap()
}

/// A fake with `base` and `tpl-py312`, and a provider mapping `python` to the second, read
/// from the variables as production reads them.
async fn setup(templates: &str) -> (E2bFake, Arc<E2bProvider>) {
    let fake = E2bFake::start_with(FakeOptions {
        templates: vec!["base".into(), "tpl-py312".into()],
        ..FakeOptions::default()
    })
    .await;
    let mut env = fake.env_vars();
    env.insert(TEMPLATES_VAR.into(), templates.into());
    let config = E2bConfig::from_env(&Env::from_map(env)).expect("config");
    let provider = Arc::new(E2bProvider::new(config).expect("provider"));
    (fake, provider)
}

#[tokio::test]
async fn each_image_is_listed_and_created_from_its_template() {
    let (fake, p) = setup("python=tpl-py312").await;
    let images = p.images();
    let rows: Vec<(&str, Option<&str>, &str)> = images
        .iter()
        .map(|i| (i.name.as_str(), i.digest.as_deref(), i.source.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("host", Some("base"), "e2b template base"),
            ("python", Some("tpl-py312"), "e2b template tpl-py312"),
        ]
    );

    let mut request = create_request(fresh_owner(1));
    request.image = name("python");
    let py = p.create(request).await.expect("create python");
    assert_eq!(
        fake.sandbox(&py.sandbox_id).unwrap().template_id,
        "tpl-py312"
    );
    let host = p.create(create_request(fresh_owner(1))).await.unwrap();
    assert_eq!(fake.sandbox(&host.sandbox_id).unwrap().template_id, "base");

    // A name with no template is refused before E2B is asked, naming the ones there are.
    let mut request = create_request(fresh_owner(1));
    request.image = name("ruby");
    let err = p.create(request).await.unwrap_err();
    match &err {
        ProviderError::InvalidRequest(message) => assert_eq!(
            message,
            "no image is registered as \"ruby\"; this deployment has: host, python"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.sandboxes().len(), 2, "nothing more was made");
}

#[tokio::test]
async fn a_template_e2b_does_not_have_fails_the_create_as_a_bad_request() {
    let (fake, p) = setup("python=tpl-gone").await;
    let mut request = create_request(fresh_owner(1));
    request.image = name("python");
    let err = p.create(request).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidRequest(m) if m.contains("tpl-gone")),
        "{err:?}"
    );
    assert!(fake.sandboxes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_pool_keeps_members_per_image_and_a_thread_takes_only_its_own() {
    let (fake, provider) = setup("python=tpl-py312").await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&db).unwrap());
    let events = SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).unwrap();
    let mut config = test_config();
    config.images = ImageDefaults::new(ImageName::host())
        .with_slack_setting("T1=python")
        .unwrap();
    let tb = Threadbox::new(
        store.clone(),
        provider.clone(),
        Arc::new(events),
        Arc::new(ManualClock::default()),
        config,
    )
    .with_warm_pool(WarmPool {
        store,
        size: 1,
        max_age: Duration::from_secs(600),
    });
    let report = tb
        .sweep(SweepOptions::for_duration(Duration::from_secs(30)))
        .await;
    assert_eq!(report.pool.created, 2, "one per image: {report:?}");
    let mut templates: Vec<String> = fake
        .sandboxes()
        .iter()
        .map(|s| s.template_id.clone())
        .collect();
    templates.sort();
    assert_eq!(templates, ["base", "tpl-py312"]);

    // The Slack workspace's threads start from python: the python member, then a create.
    let first = tb
        .resolve(&ThreadId::parse("slack:T1:C1:1712345678.000100").unwrap())
        .await
        .unwrap();
    assert!(first.pooled, "{first:?}");
    assert_eq!(
        fake.sandbox(&first.sandbox_id).unwrap().template_id,
        "tpl-py312"
    );
    let second = tb
        .resolve_with(
            &ThreadId::parse("api-python").unwrap(),
            ResolveOptions {
                image: Some(name("python")),
                ..ResolveOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(
        second.created && !second.pooled,
        "host's member is not python's: {second:?}"
    );
    assert_eq!(
        fake.sandbox(&second.sandbox_id).unwrap().template_id,
        "tpl-py312"
    );
    // A host thread takes the host member.
    let host = tb
        .resolve(&ThreadId::parse("api-host").unwrap())
        .await
        .unwrap();
    assert!(host.pooled);
    assert_eq!(fake.sandbox(&host.sandbox_id).unwrap().template_id, "base");
    assert_eq!(
        tb.load(&ThreadId::parse("api-python").unwrap())
            .await
            .unwrap()
            .image,
        name("python")
    );
}
