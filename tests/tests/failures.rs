//! Failures Azurite cannot produce, against a scripted mock server: 503 bursts, server
//! requested delays, truncated bodies, resets, the real service's stale-receipt answer,
//! continuation without NextRowKey, and secrets kept out of errors.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tablevault_azure::RetryPolicy;
use tablevault_azure::blob::BlobClient;
use tablevault_azure::config::{EMULATOR_KEY, StorageAccount};
use tablevault_azure::credential::{Credential, StaticToken};
use tablevault_azure::queue::QueueClient;
use tablevault_azure::table::{BatchOperation, Entity, Query, TableClient};
use tablevault_azure::{ClientOptions, Error};
use tablevault_tests::mock_server::{MockServer, Reply};

const PAGE: &str = r#"{"odata.metadata":"x","value":[{"PartitionKey":"p","RowKey":"r","V":1}]}"#;

fn account(server: &MockServer) -> StorageAccount {
    let e = server.endpoint();
    StorageAccount::from_connection_string(&format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
         BlobEndpoint={e};QueueEndpoint={e};TableEndpoint={e}"
    ))
    .unwrap()
}

fn fast() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            max_retries: 5,
            min_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(2),
            observer: None,
        },
        ..ClientOptions::default()
    }
}

#[tokio::test]
async fn a_503_burst_is_retried_with_a_fresh_signature_each_time() {
    let server = MockServer::start(vec![
        Reply::server_busy(),
        Reply::server_busy(),
        Reply::new(500, &[("x-ms-error-code", "OperationTimedOut")], ""),
        Reply::new(200, &[], PAGE),
    ])
    .await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    let page = t.query_page("tbl", &Query::default(), None).await.unwrap();
    assert_eq!(page.entities.len(), 1);
    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    for s in &seen {
        assert!(
            s.headers
                .iter()
                .any(|(k, v)| k == "authorization" && v.starts_with("SharedKey devstoreaccount1:"))
        );
        assert!(s.headers.iter().any(|(k, _)| k == "x-ms-date"));
    }
}

#[tokio::test]
async fn a_server_requested_delay_is_honoured() {
    let server = MockServer::start(vec![
        Reply::new(
            503,
            &[
                ("x-ms-error-code", "ServerBusy"),
                ("x-ms-retry-after-ms", "400"),
            ],
            "",
        ),
        Reply::new(200, &[], PAGE),
    ])
    .await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    let start = Instant::now();
    t.query_page("tbl", &Query::default(), None).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn retries_run_out_with_the_last_error() {
    let server = MockServer::start(vec![Reply::server_busy(); 10]).await;
    let mut opts = fast();
    opts.retry.max_retries = 2;
    let t = TableClient::with_options(&account(&server), &opts).unwrap();
    let err = t
        .query_page("tbl", &Query::default(), None)
        .await
        .unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(503), Some("ServerBusy")));
    assert!(err.is_retryable());
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn truncated_bodies_and_resets_are_retried_for_reads() {
    let server = MockServer::start(vec![
        Reply::Truncated {
            declared: PAGE.len(),
            body: PAGE.as_bytes()[..20].to_vec(),
        },
        Reply::Reset,
        Reply::new(200, &[], PAGE),
    ])
    .await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    let page = t.query_page("tbl", &Query::default(), None).await.unwrap();
    assert_eq!(page.entities[0].row_key, "r");
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn non_idempotent_requests_are_not_resent_after_ambiguous_failures() {
    let server = MockServer::start(vec![Reply::Reset, Reply::new(204, &[], "")]).await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    let err = t
        .insert_entity("tbl", &Entity::new("p", "r"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err}");
    assert_eq!(
        server.seen().len(),
        1,
        "an insert that may have landed is not sent again"
    );

    // But throttling means "not processed": safe to resend even an insert.
    let server = MockServer::start(vec![Reply::server_busy(), Reply::new(204, &[], "")]).await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    t.insert_entity("tbl", &Entity::new("p", "r"))
        .await
        .unwrap();
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_transient_failure_inside_a_batch_is_retried() {
    let failed = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 503 Service Unavailable\r\n\r\n\
{\"odata.error\":{\"code\":\"ServerBusy\",\"message\":{\"lang\":\"en-US\",\"value\":\"0:The server is busy.\"}}}\r\n\
--changesetresponse_2--\r\n--batchresponse_1--\r\n";
    let ok = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n\r\n\
--changesetresponse_2--\r\n--batchresponse_1--\r\n";
    let server =
        MockServer::start(vec![Reply::new(202, &[], failed), Reply::new(202, &[], ok)]).await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    t.submit_batch("tbl", &[BatchOperation::Insert(Entity::new("p", "r"))])
        .await
        .unwrap();
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn continuation_without_next_row_key_omits_it() {
    let server = MockServer::start(vec![
        Reply::new(
            200,
            &[("x-ms-continuation-NextPartitionKey", "1!8!cGFydA--")],
            PAGE,
        ),
        Reply::new(200, &[], r#"{"value":[]}"#),
    ])
    .await;
    let t = TableClient::with_options(&account(&server), &fast()).unwrap();
    let first = t.query_page("tbl", &Query::default(), None).await.unwrap();
    let cont = first.continuation.expect("continuation");
    assert_eq!(cont.next_row_key, None);
    let second = t
        .query_page("tbl", &Query::default(), Some(&cont))
        .await
        .unwrap();
    assert!(second.entities.is_empty() && second.continuation.is_none());
    let line = &server.seen()[1].request_line;
    assert!(line.contains("NextPartitionKey=1%218%21cGFydA--"), "{line}");
    assert!(!line.contains("NextRowKey"), "{line}");
}

#[tokio::test]
async fn azure_stale_receipt_is_lost_ownership() {
    let server = MockServer::start(vec![Reply::new(
        404,
        &[("x-ms-error-code", "MessageNotFound")],
        "<Error><Code>MessageNotFound</Code><Message>The specified message does not exist.</Message></Error>",
    )])
    .await;
    let q = QueueClient::with_options(&account(&server), "tasks", &fast()).unwrap();
    let err = q.delete_message("id", "receipt").await.unwrap_err();
    assert!(matches!(err, Error::LostOwnership { .. }), "{err}");
}

#[tokio::test]
async fn secrets_never_appear_in_errors_or_requests_logs() {
    let sig = "c2VjcmV0LXNpZ25hdHVyZQ%3D%3D";
    let server = MockServer::start(vec![Reply::new(
        403,
        &[("x-ms-error-code", "AuthenticationFailed")],
        format!("<Error><Code>AuthenticationFailed</Code><Message>Signature did not match. sig={sig}</Message></Error>"),
    )])
    .await;
    let e = server.endpoint();
    let acct = StorageAccount::from_connection_string(&format!(
        "BlobEndpoint={e};SharedAccessSignature=sv=2022-11-02&ss=b&srt=sco&sp=rwl&se=2099-01-01&sig={sig}"
    ))
    .unwrap();
    let c = BlobClient::with_options(&acct, "ctr", &fast()).unwrap();
    let err = c.get("x").await.unwrap_err();
    let shown = format!("{err} {err:?} {acct:?}");
    assert!(!shown.contains("c2VjcmV0"), "{shown}");
    assert_eq!(err.code(), Some("AuthenticationFailed"));
    // The SAS was sent, untouched, and no Authorization header with it.
    let seen = &server.seen()[0];
    assert!(
        seen.request_line.contains(&format!("sig={sig}")),
        "{}",
        seen.request_line
    );
    assert!(!seen.headers.iter().any(|(k, _)| k == "authorization"));

    // A connection refused error carries no URL either.
    let dead = StorageAccount::from_connection_string(&format!(
        "BlobEndpoint=http://127.0.0.1:1/x;SharedAccessSignature=sv=1&sig={sig}"
    ))
    .unwrap();
    let mut opts = fast();
    opts.retry.max_retries = 0;
    let err = BlobClient::with_options(&dead, "ctr", &opts)
        .unwrap()
        .get("x")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transport { .. }));
    assert!(!format!("{err} {err:?}").contains("c2VjcmV0"), "{err:?}");
}

#[tokio::test]
async fn bearer_tokens_are_sent_and_never_shown() {
    let server = MockServer::start(vec![Reply::new(201, &[], "")]).await;
    let acct = account(&server).with_credential(Credential::Token(std::sync::Arc::new(
        StaticToken::new("eyJ0eXAiOiJKV1QifQ.secret.token"),
    )));
    assert!(!format!("{acct:?}").contains("eyJ0"));
    let c = BlobClient::with_options(&acct, "ctr", &fast()).unwrap();
    c.put_blob("b", Bytes::from_static(b"x"), &Default::default())
        .await
        .unwrap();
    let seen = &server.seen()[0];
    assert!(
        seen.headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer eyJ0eXAiOiJKV1QifQ.secret.token")
    );
}

#[tokio::test]
async fn throttling_inside_retries_lowers_write_concurrency() {
    use tablevault_worker::limiter::AdaptiveLimit;
    let ok = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n\r\n\
--changesetresponse_2--\r\n--batchresponse_1--\r\n";
    let server = MockServer::start(vec![
        Reply::server_busy(),
        Reply::new(500, &[("x-ms-error-code", "OperationTimedOut")], ""),
        Reply::new(202, &[], ok),
    ])
    .await;
    let limiter = AdaptiveLimit::new(8, 1, 64);
    let mut opts = fast();
    opts.retry.observer = Some(limiter.clone());
    let t = TableClient::with_options(&account(&server), &opts).unwrap();
    let guard = limiter.acquire().await;
    t.submit_batch(
        "tbl",
        &[BatchOperation::InsertOrReplace(Entity::new("p", "r"))],
    )
    .await
    .unwrap();
    guard.success();
    assert_eq!(limiter.throttles(), 2, "both throttling answers were seen");
    assert_eq!(limiter.current(), 4, "halved once within the cool-down");
}

#[tokio::test]
async fn task_messages_are_put_at_least_once_through_ambiguous_failures() {
    use tablevault_core::queue::TaskQueue;
    let put_ok = "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
<MessageId>m1</MessageId><PopReceipt>r1</PopReceipt></QueueMessage></QueueMessagesList>";
    let server = MockServer::start(vec![
        Reply::new(500, &[("x-ms-error-code", "OperationTimedOut")], ""),
        Reply::Reset,
        Reply::new(201, &[], put_ok),
    ])
    .await;
    let q = QueueClient::with_options(&account(&server), "tasks", &fast()).unwrap();
    // Duplicates of a task are harmless (the protocol drops them), so a put whose outcome
    // is unknown is sent again rather than failing the job.
    TaskQueue::put(&q, "task", None).await.unwrap();
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn a_hung_endpoint_fails_in_bounded_time_naming_host_and_operation() {
    let server = MockServer::start(vec![Reply::Stall; 20]).await;
    let mut opts = fast();
    opts.request_timeout = Duration::from_millis(500);
    opts.deadline = Duration::from_secs(2);
    let c = BlobClient::with_options(&account(&server), "ctr", &opts).unwrap();
    let started = Instant::now();
    let err = c.get("x").await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let text = err.to_string();
    let host = server.endpoint().split('/').nth(2).unwrap().to_string();
    assert!(text.contains("Get Blob") && text.contains(&host), "{text}");
    assert!(err.is_retryable(), "a deadline is worth another try later");
}

#[tokio::test]
async fn a_refused_port_fails_in_bounded_time_naming_the_host() {
    let dead = StorageAccount::from_connection_string(&format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
         BlobEndpoint=http://127.0.0.1:9/devstoreaccount1"
    ))
    .unwrap();
    let mut opts = fast();
    opts.retry.max_retries = 100;
    opts.deadline = Duration::from_secs(2);
    let started = Instant::now();
    let err = BlobClient::with_options(&dead, "ctr", &opts)
        .unwrap()
        .get("x")
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
}

#[tokio::test]
async fn cancelling_stops_requests_and_retries_at_once() {
    let server = MockServer::start(vec![Reply::Stall; 20]).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut opts = fast();
    opts.cancel = Some(cancel.clone());
    let c = BlobClient::with_options(&account(&server), "ctr", &opts).unwrap();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let err = c.get("x").await.unwrap_err();
    canceller.await.unwrap();
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
}
