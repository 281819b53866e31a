//! What DynamoDB would charge for reading this store's items, from AWS's published sizing rules,
//! so a benchmark on another backend can say what the same work costs in read units.
//!
//! Item size (AWS, "Item sizes and formats"): the sum over attributes of the name's UTF-8 length
//! plus the value's size. A string is its UTF-8 length, a binary its length; a number is about
//! one byte per two significant digits plus one; a boolean or null one byte; a list or map three
//! bytes plus one byte per element plus its elements (a map's element names count too).
//!
//! Read units: a `Query` adds up the sizes of the items a page returns and rounds up to the next
//! 4 KB; each 4 KB is one read unit strongly consistent, half a unit eventually consistent. An
//! empty page still costs the minimum of one 4 KB block. A global secondary index can only be
//! read eventually consistently, and with an `ALL` projection (the `due` and `unsent` indexes) an
//! index entry is the whole item.

use aws_sdk_dynamodb::types::AttributeValue;

use super::items::{encode, SessionItem};
use super::lost_answers::stamped;
use threadbox_core::domain::Session;

/// The size of one read unit's block.
pub const READ_BLOCK_BYTES: usize = 4096;

/// How a read is made: the price of a 4 KB block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// One read unit per 4 KB (`GetItem` with `ConsistentRead`, base-table queries that ask).
    Strong,
    /// Half a read unit per 4 KB: every GSI query, and reads that do not ask for consistency.
    Eventual,
}

/// The size DynamoDB counts for a session as this store writes it (index attributes and the
/// write id included).
pub fn session_item_bytes(session: &Session, shards: u32) -> usize {
    let item = encode(
        "session",
        &SessionItem::from_session(session, shards.max(1), None),
    )
    .map(stamped)
    .expect("a session always encodes");
    item.iter()
        .map(|(name, value)| name.len() + value_bytes(value))
        .sum()
}

/// Read units of one `Query` page that returned items of these sizes.
pub fn query_read_units(item_bytes: impl IntoIterator<Item = usize>, read: Consistency) -> f64 {
    let total: usize = item_bytes.into_iter().sum();
    let blocks = total.div_ceil(READ_BLOCK_BYTES).max(1);
    match read {
        Consistency::Strong => blocks as f64,
        Consistency::Eventual => blocks as f64 / 2.0,
    }
}

fn value_bytes(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_bytes(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(items) => items.iter().map(String::len).sum(),
        AttributeValue::Ns(items) => items.iter().map(|n| number_bytes(n)).sum(),
        AttributeValue::Bs(items) => items.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(items) => 3 + items.iter().map(|v| 1 + value_bytes(v)).sum::<usize>(),
        AttributeValue::M(map) => {
            3 + map
                .iter()
                .map(|(k, v)| 1 + k.len() + value_bytes(v))
                .sum::<usize>()
        }
        // A type added to the SDK after this was written: count its debug form, an overestimate.
        other => format!("{other:?}").len(),
    }
}

/// One byte per two significant digits, plus one; leading and trailing zeros do not count.
fn number_bytes(n: &str) -> usize {
    let digits: String = n.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::{Change, Millis, ThreadId, Timers};

    #[test]
    fn numbers_count_significant_digits() {
        assert_eq!(number_bytes("0"), 2);
        assert_eq!(number_bytes("7"), 2);
        assert_eq!(number_bytes("1000"), 2, "trailing zeros are trimmed");
        assert_eq!(number_bytes("1767225600123"), 8);
        assert_eq!(number_bytes("-12.5"), 3);
    }

    #[test]
    fn lists_and_maps_carry_their_overhead() {
        let list = AttributeValue::L(vec![
            AttributeValue::S("ab".into()),
            AttributeValue::Bool(true),
        ]);
        assert_eq!(value_bytes(&list), 3 + (1 + 2) + (1 + 1));
        assert_eq!(value_bytes(&AttributeValue::L(vec![])), 3);
    }

    #[test]
    fn a_page_is_rounded_up_to_whole_blocks_and_never_free() {
        assert_eq!(query_read_units([], Consistency::Eventual), 0.5);
        assert_eq!(query_read_units([4096], Consistency::Strong), 1.0);
        assert_eq!(query_read_units([4000, 97], Consistency::Strong), 2.0);
        assert_eq!(query_read_units([300; 100], Consistency::Eventual), 4.0);
    }

    #[test]
    fn a_session_item_is_a_few_hundred_bytes() {
        let change = Change {
            event_id: "e1".into(),
            now: Millis(1_767_225_600_000),
            detail: None,
        };
        let thread = ThreadId::parse("slack:T0123ABCD:C0123ABCD:1767225600.000100").unwrap();
        let (session, _) = Session::new_creating(thread, "runc", change, &Timers::default());
        let bytes = session_item_bytes(&session, 16);
        assert!((150..1024).contains(&bytes), "{bytes} bytes");
    }
}
