//! Writes whose answer was lost: telling "someone else wrote first" from "we wrote, and the
//! answer never reached us".
//!
//! A conditional write can land in DynamoDB and still fail at the caller: the answer times out,
//! the connection drops, or DynamoDB itself answers 500 after committing (its documentation warns
//! of exactly that). The SDK then sends the same request again, and that second attempt finds
//! the condition failed, because the first one already moved the item. Read naively, our own
//! write reads as a conflict: a session insert as `AlreadyExists` (the resolver then waits on a
//! creation that is its own), a transition as a lost race, a warm pool claim as a member taken,
//! a dedupe claim as a delivery someone else owns, so an event would go undelivered.
//!
//! Two things make a resent write safe:
//!
//! - Every `TransactWriteItems` carries a `ClientRequestToken` of its own ([`request_token`]):
//!   DynamoDB answers a resend of the same transaction within ten minutes with success instead of
//!   running it again. The SDK resends with the token it first sent, so its retries are covered.
//! - Every item we put conditionally where a lost answer would mislead is stamped with a random
//!   write id ([`stamped`]) and asks for the item DynamoDB found when the condition failed
//!   (`ReturnValuesOnConditionCheckFailure = ALL_OLD`). If what blocks the write is, attribute for
//!   attribute, the item we sent (write id included, so no other writer can have put it), the
//!   write is ours and landed: [`put_landed`] and [`transaction_landed`] say so. This holds past
//!   the token's ten minutes and on servers that do not keep tokens (moto, DynamoDB Local).

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason};

use super::errors::unavailable;
use threadbox_core::ports::{StoreError, StoreKind};

/// An item as the SDK holds it (`items::Item`; named here so this module imports nothing but
/// the errors it maps).
type Item = std::collections::HashMap<String, AttributeValue>;

/// The attribute holding the id of the write that put the item. Readers ignore it.
pub(super) const WRITE_ID: &str = "write_id";

/// `item` with a fresh write id, so the item as written is one no other write produces.
pub(super) fn stamped(mut item: Item) -> Item {
    item.insert(
        WRITE_ID.to_owned(),
        AttributeValue::S(uuid::Uuid::new_v4().to_string()),
    );
    item
}

/// A `ClientRequestToken` for one transaction: the same for every resend of it, different for
/// every other transaction (DynamoDB refuses a token reused with other items).
pub(super) fn request_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A conditional `PutItem`'s outcome, where `sent` is the (stamped) item it put with
/// `ReturnValuesOnConditionCheckFailure = ALL_OLD`: `Ok(true)` written (now, or by an earlier
/// attempt whose answer was lost), `Ok(false)` when another write holds the item or a
/// transaction is writing it (re-read and decide again), `Err` for every other failure.
pub(super) fn put_landed<T, R: std::fmt::Debug>(
    store: StoreKind,
    operation: &str,
    sent: &Item,
    result: Result<T, SdkError<PutItemError, R>>,
) -> Result<bool, StoreError> {
    match result {
        Ok(_) => Ok(true),
        Err(e) => match e.as_service_error() {
            Some(PutItemError::ConditionalCheckFailedException(failed)) => {
                Ok(failed.item().is_some_and(|found| found == sent))
            }
            Some(PutItemError::TransactionConflictException(_)) => Ok(false),
            _ => Err(unavailable(store, operation, e)),
        },
    }
}

/// Whether a cancelled transaction was ours all along: an earlier attempt landed and this
/// resend found its own items. `sent[i]` is the item the `i`th write put with `ALL_OLD`; `None`
/// for writes that cannot tell. True when every failure is a failed condition, each failed write
/// found exactly what it sent, and at least one of them is stamped ([`stamped`]): only a write
/// id proves the write was this one. Other items can be equal across writes (an event id's
/// guard is the same item whoever puts it), so a match on those alone proves nothing: a second
/// event under a taken id must still fail.
pub(super) fn transaction_landed(reasons: &[CancellationReason], sent: &[Option<&Item>]) -> bool {
    let mut proven = false;
    for (i, reason) in reasons.iter().enumerate() {
        match reason.code() {
            None | Some("None") => continue,
            Some("ConditionalCheckFailed") => {}
            Some(_) => return false,
        }
        match (sent.get(i).copied().flatten(), reason.item()) {
            (Some(sent), Some(found)) if sent == found => {
                proven |= sent.contains_key(WRITE_ID);
            }
            _ => return false,
        }
    }
    proven
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(value: &str) -> Item {
        Item::from([("k".to_owned(), AttributeValue::S(value.to_owned()))])
    }

    fn failed_on(found: Option<Item>) -> CancellationReason {
        CancellationReason::builder()
            .code("ConditionalCheckFailed")
            .set_item(found)
            .build()
    }

    fn passed() -> CancellationReason {
        CancellationReason::builder().code("None").build()
    }

    #[test]
    fn stamps_differ_so_equal_items_mean_the_same_write() {
        let a = stamped(item("x"));
        let b = stamped(item("x"));
        assert_ne!(a, b);
        assert_eq!(a.get("k"), b.get("k"));
        assert_ne!(request_token(), request_token());
    }

    #[test]
    fn a_transaction_is_ours_only_when_every_failed_write_found_its_own_item() {
        let session = stamped(item("session"));
        let event = item("event-1");
        let sent = [Some(&session), Some(&event)];

        // The resend found both items as the lost first attempt wrote them.
        let both = [
            failed_on(Some(session.clone())),
            failed_on(Some(event.clone())),
        ];
        assert!(transaction_landed(&both, &sent));

        // Another writer's session (another write id): a real conflict.
        let other = [
            failed_on(Some(stamped(item("session")))),
            failed_on(Some(event.clone())),
        ];
        assert!(!transaction_landed(&other, &sent));

        // Items equal whoever writes them (an event id's guard) prove nothing on their own: a
        // second event under a taken id is a conflict, not ours.
        let guard = item("guard");
        assert!(!transaction_landed(
            &[passed(), failed_on(Some(guard.clone()))],
            &[Some(&session), Some(&guard)]
        ));

        // A failure without the item, or on a write that cannot tell, decides nothing.
        assert!(!transaction_landed(&[failed_on(None), passed()], &sent));
        assert!(!transaction_landed(
            &[failed_on(Some(session.clone()))],
            &[None]
        ));

        // Nothing failed, or something else failed: not a lost answer.
        assert!(!transaction_landed(&[passed(), passed()], &sent));
        let throttled = CancellationReason::builder()
            .code("ThrottlingError")
            .build();
        assert!(!transaction_landed(
            &[failed_on(Some(session.clone())), throttled],
            &sent
        ));
    }
}
