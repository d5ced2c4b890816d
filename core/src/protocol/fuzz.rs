//! Property tests of the parsers of queue text: anything on a queue (malformed, hostile,
//! from another tool) gives a task, or an error that says what is wrong, never a panic.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use proptest::prelude::*;

use super::{PoisonEntry, TaskMessage, handed_back, last_error};

fn check(text: &str) {
    let _ = TaskMessage::decode(text);
    let _ = PoisonEntry::decode(text);
    let _ = last_error(text);
    let _ = handed_back(text);
}

/// JSON-ish text near a valid message, so decoding gets past base64 and JSON.
fn near_messages() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just(r#""v":1"#.to_string()),
        Just(r#""v":"1""#.to_string()),
        Just(r#""kind":"backup""#.to_string()),
        Just(r#""kind":"restore""#.to_string()),
        Just(r#""kind":"tables""#.to_string()),
        Just(
            r#""tables":[{"table":"Tbl","task":"r0000"},{"table":"T2","task":"r0001"}]"#
                .to_string()
        ),
        Just(r#""tables":[{"table":"../x","task":"r0000"}]"#.to_string()),
        Just(r#""range":{"start":null,"end":{"pk":"a","rk":""}}"#.to_string()),
        Just(r#""job":"20260101T000000Z-00000000""#.to_string()),
        Just(r#""table":"Tbl""#.to_string()),
        Just(r#""task":"r0000""#.to_string()),
        Just(r#""container":"c""#.to_string()),
        Just(r#""block":18446744073709551615"#.to_string()),
        Just(r#""blob":-1"#.to_string()),
        Just(r#""restore":"../x""#.to_string()),
        "\"[a-z_]{1,8}\":(null|true|[0-9]{1,3}|\"[^\"]{0,6}\"|\\[\\]|\\{\\})",
    ];
    proptest::collection::vec(field, 0..10).prop_map(|fs| format!("{{{}}}", fs.join(",")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn any_text_is_parsed_or_refused(text in ".{0,200}") {
        check(&text);
    }

    #[test]
    fn any_base64_payload_is_parsed_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check(&BASE64.encode(bytes));
    }

    #[test]
    fn near_valid_messages_are_parsed_or_refused(json in near_messages()) {
        let text = BASE64.encode(&json);
        check(&text);
        if let Ok(m) = TaskMessage::decode(&text) {
            // Whatever is accepted is a message that names safe paths.
            prop_assert!(crate::protocol::is_valid_backup_id(&m.job));
            prop_assert!(crate::protocol::is_valid_backup_id(&m.task));
            if let crate::protocol::TaskKind::Tables { tables } = &m.kind {
                prop_assert!(!tables.is_empty());
                for t in tables {
                    prop_assert!(crate::protocol::is_valid_backup_id(&t.task));
                }
            }
        }
    }
}
