//! Writes whose answer is lost, and writes that meet a transaction, against whatever endpoint
//! `AWS_ENDPOINT_URL` names (moto's server under `scripts/test.sh`).
//!
//! The fault: the write reaches DynamoDB and lands, but its answer does not come back. An SDK
//! interceptor swaps the first answer to the chosen operation for a 500 after the server has
//! done the work, as DynamoDB itself may answer; the SDK then sends the same request again, which
//! finds its own write in the way. Every such write must read as written: an insert not as
//! `AlreadyExists`, a version bump not as a lost race, a warm pool claim not as a member taken,
//! a dedupe claim not as someone else's delivery. moto keeps no `ClientRequestToken`s, so these
//! prove the write-id check (`adapters::dynamo::lost_answers`), which holds everywhere.
//!
//! And a single write refused with `TransactionConflictException` (a transaction holds the item)
//! reads as the conflict it is, not as DynamoDB being unavailable (a 503 to the caller).
//!
//! Without an endpoint every test says why it is skipped and passes, unless
//! `THREADBOX_REQUIRE_AWS=1`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use threadbox_aws::dynamo::{create_dedupe_table, DynamoConfig, DynamoDedupe, DynamoSessionStore};
use threadbox_core::domain::{
    LifecycleEvent, MemberState, Millis, NetworkProfile, PoolMember, Session, Status, ThreadId,
    Timers,
};
use threadbox_core::ports::{DedupeStore, PoolClaim, SessionStore, StoreError, WarmPoolStore};
use threadbox_tests::aws::{self, aws_configured, sdk_config, unique_name};
use threadbox_tests::warm_pool::{change, claim_of};

/// What the interceptor does to the next answer to a request for one operation.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The request was served; its answer becomes a 500, so the SDK sends it again.
    LoseAnswer,
    /// The request never reaches the write (it is turned into a harmless read), and the answer
    /// is DynamoDB's refusal of a write a transaction holds.
    TransactionConflict,
}

/// Arms one fault for the next request whose `X-Amz-Target` ends with the operation's name.
#[derive(Debug, Default)]
struct Faults {
    armed: Mutex<Option<(&'static str, Fault)>>,
    /// The fault chosen for the attempt in flight (set before transmit, used on its answer).
    current: Mutex<Option<Fault>>,
    /// How many answers were altered.
    fired: Mutex<u32>,
}

#[derive(Clone, Debug, Default)]
struct FaultInterceptor(Arc<Faults>);

impl FaultInterceptor {
    fn arm(&self, operation: &'static str, fault: Fault) {
        *self.0.armed.lock().unwrap() = Some((operation, fault));
    }

    fn fired(&self) -> u32 {
        *self.0.fired.lock().unwrap()
    }
}

impl Intercept for FaultInterceptor {
    fn name(&self) -> &'static str {
        "FaultInterceptor"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let mut armed = self.0.armed.lock().unwrap();
        let fault = match *armed {
            Some((operation, fault)) if target.ends_with(&format!(".{operation}")) => {
                *armed = None;
                Some(fault)
            }
            _ => None,
        };
        if let Some(Fault::TransactionConflict) = fault {
            context
                .request_mut()
                .headers_mut()
                .insert("x-amz-target", "DynamoDB_20120810.DescribeLimits");
        }
        *self.0.current.lock().unwrap() = fault;
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(fault) = self.0.current.lock().unwrap().take() else {
            return Ok(());
        };
        let response = context.response_mut();
        match fault {
            // The body stays the success the server sent; the status says it failed, as a lost
            // or broken answer does. The SDK reads a 500 as transient and sends it again.
            Fault::LoseAnswer => {
                *response.status_mut() = 500.try_into()?;
            }
            // The error code in the header wins over the body's (the JSON protocol's rule).
            Fault::TransactionConflict => {
                *response.status_mut() = 400.try_into()?;
                response
                    .headers_mut()
                    .insert("x-amzn-errortype", "TransactionConflictException");
            }
        }
        *self.0.fired.lock().unwrap() += 1;
        Ok(())
    }
}

/// A store on fresh tables whose client carries the fault interceptor, or `None` when skipped.
async fn faulty_store(test: &str) -> Option<(DynamoSessionStore, FaultInterceptor)> {
    if !aws_configured(test) {
        return None;
    }
    let sdk = sdk_config().await;
    // The tables come from a plain store; the faulty one shares them.
    let tables = aws::fresh_store(&sdk).await;
    let faults = FaultInterceptor::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(faults.clone())
            .build(),
    );
    let config: DynamoConfig = tables.config().clone();
    Some((DynamoSessionStore::new(client, config), faults))
}

fn new_thread(id: &str) -> (Session, LifecycleEvent) {
    Session::new_creating(
        ThreadId::parse(id).unwrap(),
        "test",
        change(1_000),
        &Timers::default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_thread_whose_answer_was_lost_is_created_once_not_already_existing() {
    let Some((store, faults)) = faulty_store("a_new_thread_whose_answer_was_lost").await else {
        return;
    };
    let (session, event) = new_thread("lost-insert");
    faults.arm("TransactWriteItems", Fault::LoseAnswer);
    store
        .insert_new(&session, std::slice::from_ref(&event))
        .await
        .expect("the insert landed; its lost answer must not read as AlreadyExists");
    assert_eq!(faults.fired(), 1, "the fault fired");
    assert_eq!(
        store.load(&session.thread_id).await.unwrap(),
        Some(session.clone())
    );
    let events = store.events_after(&session.thread_id, 0, 10).await.unwrap();
    assert_eq!(events, vec![event], "the event is there once");

    // Another writer's insert of the same thread is still refused.
    let (again, again_event) = new_thread("lost-insert");
    assert!(matches!(
        store.insert_new(&again, &[again_event]).await,
        Err(StoreError::AlreadyExists(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_whose_answer_was_lost_is_written_and_a_real_race_still_loses() {
    let Some((store, faults)) = faulty_store("a_version_bump_whose_answer_was_lost").await else {
        return;
    };
    let (session, event) = new_thread("lost-save");
    store.insert_new(&session, &[event]).await.unwrap();

    let mut touched = session.clone();
    touched.last_activity_at = Millis(1_500);
    touched.version += 1;
    faults.arm("PutItem", Fault::LoseAnswer);
    store
        .save(&touched, session.version, &[])
        .await
        .expect("the save landed; its lost answer must not read as a version conflict");
    assert_eq!(faults.fired(), 1);
    assert_eq!(
        store.load(&session.thread_id).await.unwrap(),
        Some(touched.clone())
    );

    // The same change from the same version by someone else is a conflict: its item is not ours.
    let mut rival = session.clone();
    rival.last_activity_at = Millis(1_500);
    rival.version += 1;
    assert!(matches!(
        store.save(&rival, session.version, &[]).await,
        Err(StoreError::VersionConflict { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_pool_claim_whose_answer_was_lost_is_bound_not_taken() {
    let Some((store, faults)) = faulty_store("a_warm_pool_claim_whose_answer_was_lost").await
    else {
        return;
    };
    let (session, event) = new_thread("lost-claim");
    store.insert_new(&session, &[event]).await.unwrap();
    let mut member = PoolMember::creating(NetworkProfile::Restricted, Millis(500));
    store.add_member(&member).await.unwrap();
    member.state = MemberState::Ready;
    member.sandbox_id = Some(format!("sb-{}", member.member_id));
    faults.arm("PutItem", Fault::LoseAnswer);
    assert!(
        store
            .update_member(&member, MemberState::Creating)
            .await
            .unwrap(),
        "the member's update landed; its lost answer must not read as a member moved on"
    );

    let (taken, bound, bound_events) = claim_of(&member, &session);
    faults.arm("TransactWriteItems", Fault::LoseAnswer);
    let claim = store
        .claim_member(&taken, &bound, session.version, &bound_events)
        .await
        .unwrap();
    assert_eq!(claim, PoolClaim::Bound);
    assert_eq!(faults.fired(), 2);
    let stored = store.load(&session.thread_id).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Active);
    assert_eq!(stored.sandbox_id, member.sandbox_id);
    assert_eq!(store.member(&member.member_id).await.unwrap(), Some(taken));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_claim_whose_answer_was_lost_is_still_ours_and_no_one_elses() {
    if !aws_configured("a_dedupe_claim_whose_answer_was_lost") {
        return;
    }
    let sdk = sdk_config().await;
    let table = unique_name("dedupe");
    let plain = DynamoDedupe::from_sdk_config(&sdk, table.clone());
    create_dedupe_table(&aws_sdk_dynamodb::Client::new(&sdk), &table)
        .await
        .expect("create the dedupe table");
    let faults = FaultInterceptor::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(faults.clone())
            .build(),
    );
    let faulty = DynamoDedupe::new(client, table);

    faults.arm("PutItem", Fault::LoseAnswer);
    assert!(
        faulty
            .claim("slack:event-1", Duration::from_secs(600))
            .await
            .unwrap(),
        "the claim landed; its lost answer must not hand the delivery to no one"
    );
    assert_eq!(faults.fired(), 1);
    // A second claimer in the same second writes an item equal but for its write id: refused.
    assert!(!plain
        .claim("slack:event-1", Duration::from_secs(600))
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_write_a_transaction_holds_is_a_conflict_not_an_outage() {
    let Some((store, faults)) = faulty_store("a_single_write_a_transaction_holds").await else {
        return;
    };
    let (session, event) = new_thread("held-by-a-transaction");
    store.insert_new(&session, &[event]).await.unwrap();
    let mut touched = session.clone();
    touched.last_activity_at = Millis(1_500);
    touched.version += 1;
    faults.arm("PutItem", Fault::TransactionConflict);
    let refused = store.save(&touched, session.version, &[]).await;
    assert_eq!(faults.fired(), 1);
    assert!(
        matches!(refused, Err(StoreError::VersionConflict { .. })),
        "a TransactionConflictException must read as a conflict (re-read and decide), got \
         {refused:?}"
    );
    // Nothing was written; the write goes through once the transaction is gone.
    assert_eq!(
        store.load(&session.thread_id).await.unwrap(),
        Some(session.clone())
    );
    store.save(&touched, session.version, &[]).await.unwrap();
}
