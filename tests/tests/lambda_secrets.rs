//! Secrets by reference against moto's Secrets Manager: a function's environment names a secret
//! (`<VAR>_SECRET_ID`), the value is fetched at start-up, and a rotated value is picked up at the
//! next refresh, rebuilding what was built from it, without a deploy.

use std::time::Duration;

use threadbox_lambda::secrets::REFRESH_VAR;
use threadbox_lambda::{Env, Rebuilt, SecretSet};
use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_fetched_by_reference_and_rotation_is_picked_up() {
    if !aws_configured("secrets_are_fetched_by_reference_and_rotation_is_picked_up") {
        return;
    }
    let sdk = sdk_config().await;
    let client = aws_sdk_secretsmanager::Client::new(&sdk);
    let name = format!("threadbox/{}", unique_name("bot-token"));
    client
        .create_secret()
        .name(&name)
        .secret_string("xoxb-first-value")
        .send()
        .await
        .unwrap();

    let reference = name.clone();
    let base = move || {
        Env::from_pairs(&[
            ("SLACK_BOT_TOKEN_SECRET_ID", reference.as_str()),
            (REFRESH_VAR, "1"),
            ("OTHER", "kept"),
        ])
    };
    let secrets = SecretSet::fetch(&sdk, &base()).await.unwrap();
    let shown = format!("{secrets:?}");
    assert!(!shown.contains("xoxb-first-value"), "{shown}");
    let env = secrets.env_over(base());
    assert_eq!(
        env.get("SLACK_BOT_TOKEN").as_deref(),
        Some("xoxb-first-value")
    );
    assert_eq!(env.get("OTHER").as_deref(), Some("kept"));

    // What a function builds from the value (its Slack client) is rebuilt on rotation.
    let built = Rebuilt::with_base(secrets.clone(), base, |env: Env| async move {
        Ok(env.get("SLACK_BOT_TOKEN").unwrap())
    })
    .await
    .unwrap();
    assert_eq!(*built.current().await, "xoxb-first-value");

    client
        .put_secret_value()
        .secret_id(&name)
        .secret_string("xoxb-rotated-value")
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        *built.current().await,
        "xoxb-rotated-value",
        "rotation picked up"
    );
    assert!(!secrets.due(), "and the refresh clock restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_stops_start_up_naming_the_variable() {
    if !aws_configured("a_missing_secret_stops_start_up_naming_the_variable") {
        return;
    }
    let sdk = sdk_config().await;
    let env = Env::from_pairs(&[("E2B_API_KEY_SECRET_ID", "threadbox/does-not-exist")]);
    let err = SecretSet::fetch(&sdk, &env).await.unwrap_err().to_string();
    assert!(err.starts_with("E2B_API_KEY is invalid"), "{err}");
    assert!(err.contains("threadbox/does-not-exist"), "{err}");
}

/// E2B refusing the API key (rotated in E2B and in Secrets Manager) marks the function's
/// secrets stale, so the rotated key is fetched before the next refresh would come round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_e2b_key_sends_the_function_for_the_rotated_one() {
    use std::collections::BTreeMap;
    use threadbox_core::ports::ProviderError;
    use threadbox_testing::e2b_fake::E2bFake;

    if !aws_configured("a_refused_e2b_key_sends_the_function_for_the_rotated_one") {
        return;
    }
    let sdk = sdk_config().await;
    let fake = E2bFake::start().await;
    let client = aws_sdk_secretsmanager::Client::new(&sdk);
    let name = format!("threadbox/{}", unique_name("e2b-key"));
    client
        .create_secret()
        .name(&name)
        .secret_string(fake.api_key())
        .send()
        .await
        .unwrap();

    let mut pairs: Vec<(String, String)> = fake
        .env_vars()
        .into_iter()
        .filter(|(k, _)| k != "E2B_API_KEY")
        .collect();
    for (k, v) in [
        ("E2B_API_KEY_SECRET_ID", name.as_str()),
        ("THREADBOX_PROVIDER", "e2b"),
        ("THREADBOX_SESSIONS_TABLE", "sessions"),
        ("THREADBOX_EVENTS_TABLE", "events"),
        ("THREADBOX_LIFECYCLE_QUEUE_URL", "http://127.0.0.1:1/q.fifo"),
        (
            "THREADBOX_LIFECYCLE_DLQ_URL",
            "http://127.0.0.1:1/q-dlq.fifo",
        ),
        (REFRESH_VAR, "3600"),
    ] {
        pairs.push((k.to_owned(), v.to_owned()));
    }
    let base = move || {
        let borrowed: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Env::from_pairs(&borrowed)
    };
    let secrets = SecretSet::fetch(&sdk, &base()).await.unwrap();
    let watched = secrets.clone();
    let built = Rebuilt::with_base(secrets.clone(), base, move |env: Env| {
        let (sdk, secrets) = (sdk.clone(), watched.clone());
        async move { threadbox_lambda::threadbox(&sdk, &env, &secrets).await }
    })
    .await
    .unwrap();
    let none = BTreeMap::new();
    built.current().await.provider.list(&none).await.unwrap();
    assert!(!secrets.marked_stale());

    let rotated = "e2b_rotated0123456789abcdef01234567";
    fake.rotate_api_key(rotated);
    client
        .put_secret_value()
        .secret_id(&name)
        .secret_string(rotated)
        .send()
        .await
        .unwrap();
    assert!(matches!(
        built.current().await.provider.list(&none).await,
        Err(ProviderError::Unauthorized(_))
    ));
    assert!(
        secrets.marked_stale(),
        "the refusal asks for a fetch before the hour is up"
    );
    assert!(secrets.refresh().await.unwrap(), "the rotated key is there");
}
