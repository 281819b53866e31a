//! Checkpoints on E2B: the contract threadbox builds on (`e2b-contract.md`) lists E2B's snapshot
//! and fork endpoints only as optional, with no restore into a running sandbox, so the adapter
//! keeps the port's default: every checkpoint operation is refused as `unsupported`, naming the
//! provider, and nothing reaches E2B's control plane.

use threadbox_core::domain::CheckpointId;
use threadbox_core::ports::{ForkSandbox, ProviderError, SandboxProvider};
use threadbox_e2b::{E2bConfig, E2bProvider};
use threadbox_testing::e2b_fake::E2bFake;
use threadbox_testing::provider_conformance::{create_request, fresh_owner};

#[tokio::test]
async fn every_checkpoint_operation_is_unsupported_and_says_e2b() {
    let fake = E2bFake::start().await;
    let env = threadbox_core::config::Env::from_map(fake.env_vars());
    let p = E2bProvider::new(E2bConfig::from_env(&env).expect("config")).expect("provider");
    let id = p
        .create(create_request(fresh_owner(1)))
        .await
        .expect("create")
        .sandbox_id;
    let cp = CheckpointId::generate();
    let refusals = [
        // Asked first by the use cases, so a refusal writes nothing.
        p.checkpoint_support(),
        p.checkpoint(&id, &cp, 1 << 30).await.map(drop),
        p.restore(&id, &cp).await.map(drop),
        p.fork(ForkSandbox {
            source: id.clone(),
            checkpoint: None,
            create: create_request(fresh_owner(1)),
        })
        .await
        .map(drop),
    ];
    for refused in refusals {
        match refused {
            Err(ProviderError::Unsupported(why)) => assert!(why.contains("e2b"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        p.list(&Default::default()).await.unwrap().len(),
        1,
        "no fork was made"
    );
    // Deleting a checkpoint a provider never made is nothing to do.
    let thread = threadbox_core::domain::ThreadId::parse("any-thread").unwrap();
    p.delete_checkpoint(&thread, &cp).await.expect("delete");
    p.delete_thread_checkpoints(&thread)
        .await
        .expect("delete all");
}
