//! Mapping SDK errors to `StoreError`. Conflicts are recognised by the SDK's typed exceptions and
//! the structured cancellation reason codes of a transaction, never by message text.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::CancellationReason;

use threadbox_core::ports::{StoreError, StoreKind};

/// Any failure that is not a conflict: the store could not do what was asked, and nothing that
/// call would have written was written (every write here is a single item or one transaction).
pub(super) fn unavailable<E, R>(
    store: StoreKind,
    operation: &str,
    err: SdkError<E, R>,
) -> StoreError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    StoreError::unavailable(
        store,
        format!("DynamoDB {operation}: {}", DisplayErrorContext(&err)),
    )
}

/// A single conditional write's outcome: `Ok(true)` written, `Ok(false)` when its condition
/// failed (someone else wrote first) or a transaction was writing the same item at that moment
/// (`TransactionConflictException`: the same answer, re-read and decide again, never a 503),
/// `Err` for every other failure. `failed` is the operation error's own
/// `is_conditional_check_failed_exception`.
pub(super) fn condition_held<T, E, R>(
    store: StoreKind,
    operation: &str,
    result: Result<T, SdkError<E, R>>,
    failed: impl Fn(&E) -> bool,
) -> Result<bool, StoreError>
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| failed(se) || is_transaction_conflict(se)) =>
        {
            Ok(false)
        }
        Err(e) => Err(unavailable(store, operation, e)),
    }
}

/// DynamoDB refused a single write because a transaction holds the item: by its error code,
/// which every write operation's error shares.
fn is_transaction_conflict(error: &impl ProvideErrorMetadata) -> bool {
    error.code() == Some("TransactionConflictException")
}

/// What a cancelled transaction means for the caller.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Cancelled {
    /// A condition failed (the session's version or existence, or an event's seq or id was
    /// taken), or another transaction was writing the same items: re-read and decide again.
    Conflict,
    /// Anything else (throttling, validation, ...): the codes, for the error message.
    Other(String),
}

/// Classify a failed `TransactWriteItems`: `Ok(Cancelled)` when DynamoDB cancelled it, with the
/// reasons read, `Err` for every other failure.
pub(super) fn cancelled<R: std::fmt::Debug>(
    store: StoreKind,
    err: SdkError<TransactWriteItemsError, R>,
) -> Result<Cancelled, StoreError> {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
            Ok(classify(e.cancellation_reasons()))
        }
        _ => Err(unavailable(store, "TransactWriteItems", err)),
    }
}

/// The reasons of a cancelled `TransactWriteItems`, one per item in the order they were sent;
/// `Err` for every other failure.
pub(super) fn cancellation_reasons<R: std::fmt::Debug>(
    store: StoreKind,
    err: SdkError<TransactWriteItemsError, R>,
) -> Result<Vec<CancellationReason>, StoreError> {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
            Ok(e.cancellation_reasons().to_vec())
        }
        _ => Err(unavailable(store, "TransactWriteItems", err)),
    }
}

/// The index and code of the first item whose reason is a failure (its code other than `None`):
/// which write of the transaction stopped it.
pub(super) fn first_failure(reasons: &[CancellationReason]) -> Option<(usize, &str)> {
    reasons
        .iter()
        .enumerate()
        .find_map(|(i, r)| r.code().filter(|c| *c != "None").map(|c| (i, c)))
}

/// The reasons' codes, for an error message.
pub(super) fn reason_codes(reasons: &[CancellationReason]) -> String {
    reasons
        .iter()
        .map(|r| r.code().unwrap_or("None"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the reasons of a cancelled transaction mean for the caller.
pub(super) fn classify(reasons: &[CancellationReason]) -> Cancelled {
    let codes: Vec<&str> = reasons.iter().filter_map(|r| r.code()).collect();
    if codes
        .iter()
        .any(|c| matches!(*c, "ConditionalCheckFailed" | "TransactionConflict"))
    {
        Cancelled::Conflict
    } else {
        Cancelled::Other(codes.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str) -> CancellationReason {
        CancellationReason::builder().code(code).build()
    }

    #[test]
    fn a_failed_condition_anywhere_in_the_transaction_is_a_conflict() {
        assert_eq!(
            classify(&[reason("None"), reason("ConditionalCheckFailed")]),
            Cancelled::Conflict
        );
        assert_eq!(
            classify(&[reason("TransactionConflict"), reason("None")]),
            Cancelled::Conflict
        );
    }

    #[test]
    fn the_first_failed_reason_names_its_item() {
        let none = CancellationReason::builder().build();
        assert_eq!(
            first_failure(&[
                reason("None"),
                none.clone(),
                reason("ConditionalCheckFailed"),
                reason("TransactionConflict"),
            ]),
            Some((2, "ConditionalCheckFailed"))
        );
        assert_eq!(first_failure(&[reason("None"), none.clone()]), None);
        assert_eq!(first_failure(&[]), None);
        assert_eq!(
            reason_codes(&[reason("ThrottlingError"), none]),
            "ThrottlingError, None"
        );
    }

    #[test]
    fn other_cancellations_keep_their_codes() {
        assert_eq!(
            classify(&[reason("ThrottlingError"), reason("None")]),
            Cancelled::Other("ThrottlingError, None".into())
        );
    }
}
