//! The Queue client against Azurite: put with TTLs, claim with visibility, update,
//! delete, peek, count, and a stale pop receipt surfacing as lost ownership.

use std::time::Duration;

use tablevault_azure::Error;
use tablevault_azure::queue::{MessageTtl, QueueClient};
use tablevault_tests::{TestEnv, unique_lower};

#[tokio::test]
async fn message_lifecycle() {
    let env = TestEnv::start().await;
    let q = QueueClient::new(&env.account, &unique_lower("q")).unwrap();
    q.create().await.unwrap();
    q.create().await.unwrap(); // idempotent

    let text = r#"{"task":"a & <b>","key":"o'neil ü"}"#;
    q.put_message(text, None, MessageTtl::Never).await.unwrap();
    q.put_message("second", None, MessageTtl::After(Duration::from_secs(3600)))
        .await
        .unwrap();
    q.put_message(
        "later",
        Some(Duration::from_secs(3600)),
        MessageTtl::Default,
    )
    .await
    .unwrap();
    assert_eq!(q.approximate_count().await.unwrap(), 3);

    let peeked = q.peek_messages(32).await.unwrap();
    assert_eq!(peeked.len(), 2, "the delayed message is not visible");
    assert_eq!(peeked[0].text, text);

    let got = q.get_messages(32, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].text, text);
    assert_eq!(got[0].dequeue_count, 1);
    assert!(
        q.get_messages(32, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "claimed messages are invisible"
    );

    // Extending visibility gives a new receipt and retires the old one.
    let m = &got[0];
    let new_receipt = q
        .update_message(&m.message_id, &m.pop_receipt, Duration::from_secs(60), None)
        .await
        .unwrap();
    assert_ne!(new_receipt, m.pop_receipt);
    let err = q
        .delete_message(&m.message_id, &m.pop_receipt)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::LostOwnership { .. }),
        "stale receipt: {err}"
    );
    let err = q
        .update_message(&m.message_id, &m.pop_receipt, Duration::from_secs(60), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::LostOwnership { .. }),
        "stale receipt: {err}"
    );
    q.delete_message(&m.message_id, &new_receipt).await.unwrap();

    // Replacing the text while extending.
    let m = &got[1];
    let r = q
        .update_message(
            &m.message_id,
            &m.pop_receipt,
            Duration::from_secs(0),
            Some("rewritten"),
        )
        .await
        .unwrap();
    assert!(!r.is_empty());
    let again = q.get_messages(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(again[0].text, "rewritten");
    assert_eq!(again[0].dequeue_count, 2, "redelivered");
    q.delete_message(&again[0].message_id, &again[0].pop_receipt)
        .await
        .unwrap();

    q.clear().await.unwrap();
    assert_eq!(q.approximate_count().await.unwrap(), 0);
    q.delete().await.unwrap();
}

#[tokio::test]
async fn a_message_is_redelivered_when_its_visibility_lapses_and_the_old_receipt_goes_stale() {
    let env = TestEnv::start().await;
    let q = QueueClient::new(&env.account, &unique_lower("q")).unwrap();
    q.create().await.unwrap();
    q.put_message("work", None, MessageTtl::Never)
        .await
        .unwrap();
    let first = q
        .get_messages(1, Duration::from_secs(1))
        .await
        .unwrap()
        .remove(0);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let second = q
        .get_messages(1, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.message_id, first.message_id);
    assert_eq!(second.dequeue_count, 2);
    // The first consumer has lost the message.
    let err = q
        .update_message(
            &first.message_id,
            &first.pop_receipt,
            Duration::from_secs(30),
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LostOwnership { .. }), "{err}");
    q.delete_message(&second.message_id, &second.pop_receipt)
        .await
        .unwrap();
}

#[tokio::test]
async fn oversized_messages_are_refused_before_sending() {
    let env = TestEnv::start().await;
    let q = QueueClient::new(&env.account, &unique_lower("q")).unwrap();
    q.create().await.unwrap();
    let err = q
        .put_message(&"x".repeat(70_000), None, MessageTtl::Default)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err}");
}
