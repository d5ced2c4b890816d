//! Azure Queue storage client: create, put (with TTL, including never-expire), get with a
//! visibility timeout, update visibility (new pop receipt), delete, peek, approximate
//! count. A stale pop receipt is one distinct error, [`Error::LostOwnership`].

use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;

use crate::Service;
use crate::config::{ConfigError, StorageAccount};
use crate::error::{Error, Result};
use crate::pipeline::Idempotency;
use crate::pipeline::{ClientOptions, Request, ServiceClient, encode};

/// Largest message the service accepts, in bytes of (escaped) message text.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Most messages one Get Messages call returns.
pub const MAX_GET_MESSAGES: u8 = 32;

/// How long a message lives in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageTtl {
    /// The service default (7 days).
    #[default]
    Default,
    /// Never expires (`messagettl=-1`).
    Never,
    /// Expires after this long.
    After(Duration),
}

/// What Put Message returns.
#[derive(Debug, Clone)]
pub struct PutReceipt {
    /// The new message's id.
    pub message_id: String,
    /// A pop receipt valid until the message is dequeued.
    pub pop_receipt: String,
}

/// A message claimed by Get Messages.
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    /// Message id.
    pub message_id: String,
    /// The receipt that proves ownership; replaced by every update.
    pub pop_receipt: String,
    /// How many times the message has been dequeued, this time included.
    pub dequeue_count: u64,
    /// The message text, XML-unescaped.
    pub text: String,
}

/// A message seen by Peek Messages (not claimed).
#[derive(Debug, Clone)]
pub struct PeekedMessage {
    /// Message id.
    pub message_id: String,
    /// How many times it has been dequeued.
    pub dequeue_count: u64,
    /// The message text.
    pub text: String,
}

#[derive(Deserialize)]
struct MessagesList {
    #[serde(rename = "QueueMessage", default)]
    messages: Vec<RawMessage>,
}

#[derive(Deserialize)]
struct RawMessage {
    #[serde(rename = "MessageId")]
    message_id: String,
    #[serde(rename = "PopReceipt", default)]
    pop_receipt: Option<String>,
    #[serde(rename = "DequeueCount", default)]
    dequeue_count: Option<u64>,
    #[serde(rename = "MessageText", default)]
    text: Option<String>,
}

/// A client for one queue.
#[derive(Clone)]
pub struct QueueClient {
    svc: ServiceClient,
    queue: String,
}

/// Whether a queue name is valid: 3-63 lower-case letters, digits and single hyphens, not
/// starting or ending with a hyphen.
pub fn is_valid_queue_name(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !name.contains("--")
}

impl QueueClient {
    /// A client for `queue` with default options.
    pub fn new(account: &StorageAccount, queue: &str) -> std::result::Result<Self, ConfigError> {
        Self::with_options(account, queue, &ClientOptions::default())
    }

    /// A client for `queue` with explicit options.
    pub fn with_options(
        account: &StorageAccount,
        queue: &str,
        options: &ClientOptions,
    ) -> std::result::Result<Self, ConfigError> {
        if !is_valid_queue_name(queue) {
            return Err(ConfigError::NotConfigured(format!(
                "{queue:?} is not a valid queue name (3-63 lower-case letters, digits and hyphens)"
            )));
        }
        Ok(QueueClient {
            svc: ServiceClient::new(account, Service::Queue, options)?,
            queue: queue.to_string(),
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.queue
    }

    /// Creates the queue; succeeds if it already exists.
    pub async fn create(&self) -> Result<()> {
        let req = Request::new("Create Queue", Method::PUT, format!("/{}", self.queue));
        match self.svc.send(req).await {
            Ok(_) => Ok(()),
            Err(e) if e.has_code("QueueAlreadyExists") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the queue and its messages.
    pub async fn delete(&self) -> Result<()> {
        let req = Request::new("Delete Queue", Method::DELETE, format!("/{}", self.queue));
        self.svc.send(req).await.map(|_| ())
    }

    /// Adds a message. `visible_after` delays its first delivery.
    ///
    /// Not idempotent: a retry after an ambiguous failure could enqueue it twice, so only
    /// failures the service certainly rejected are retried. See
    /// [`put_message_at_least_once`](Self::put_message_at_least_once) for consumers that
    /// tolerate duplicates.
    pub async fn put_message(
        &self,
        text: &str,
        visible_after: Option<Duration>,
        ttl: MessageTtl,
    ) -> Result<PutReceipt> {
        self.put(text, visible_after, ttl, Idempotency::NotIdempotent)
            .await
    }

    /// Adds a message, retrying through ambiguous failures (timeouts, resets, a 500 after
    /// the message may have been stored), for consumers to whom a duplicate is harmless.
    pub async fn put_message_at_least_once(
        &self,
        text: &str,
        visible_after: Option<Duration>,
        ttl: MessageTtl,
    ) -> Result<PutReceipt> {
        self.put(text, visible_after, ttl, Idempotency::Idempotent)
            .await
    }

    async fn put(
        &self,
        text: &str,
        visible_after: Option<Duration>,
        ttl: MessageTtl,
        idempotency: Idempotency,
    ) -> Result<PutReceipt> {
        const OP: &str = "Put Message";
        let escaped = quick_xml::escape::escape(text);
        if escaped.len() > MAX_MESSAGE_BYTES {
            return Err(Error::invalid_request(
                OP,
                format!(
                    "message is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
                    escaped.len()
                ),
            ));
        }
        let body = format!("<QueueMessage><MessageText>{escaped}</MessageText></QueueMessage>");
        let mut req = Request::new(OP, Method::POST, format!("/{}/messages", self.queue))
            .header("content-type", "application/xml")
            .body(body)
            .idempotency(idempotency);
        if let Some(v) = visible_after {
            req = req.query("visibilitytimeout", v.as_secs().to_string());
        }
        match ttl {
            MessageTtl::Default => {}
            MessageTtl::Never => req = req.query("messagettl", "-1"),
            MessageTtl::After(d) => req = req.query("messagettl", d.as_secs().max(1).to_string()),
        }
        let resp = self.svc.send(req).await?;
        let list = parse_list(OP, &resp.body)?;
        let m = list
            .messages
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid_response(OP, "no message in the response"))?;
        Ok(PutReceipt {
            message_id: m.message_id,
            pop_receipt: m.pop_receipt.unwrap_or_default(),
        })
    }

    /// Claims up to `count` (1-32) messages, hiding them from others for `visibility`.
    pub async fn get_messages(
        &self,
        count: u8,
        visibility: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        const OP: &str = "Get Messages";
        let req = Request::new(OP, Method::GET, format!("/{}/messages", self.queue))
            .query(
                "numofmessages",
                count.clamp(1, MAX_GET_MESSAGES).to_string(),
            )
            .query("visibilitytimeout", visibility.as_secs().max(1).to_string())
            // A lost response would leave messages invisible until their timeout; that only
            // delays them, which at-least-once consumers tolerate.
            .idempotency(Idempotency::NotIdempotent);
        let resp = self.svc.send(req).await?;
        parse_list(OP, &resp.body)?
            .messages
            .into_iter()
            .map(|m| {
                Ok(ReceivedMessage {
                    pop_receipt: m
                        .pop_receipt
                        .ok_or_else(|| Error::invalid_response(OP, "message without PopReceipt"))?,
                    dequeue_count: m.dequeue_count.unwrap_or(1),
                    text: m.text.unwrap_or_default(),
                    message_id: m.message_id,
                })
            })
            .collect()
    }

    /// Looks at up to `count` visible messages without claiming them.
    pub async fn peek_messages(&self, count: u8) -> Result<Vec<PeekedMessage>> {
        const OP: &str = "Peek Messages";
        let req = Request::new(OP, Method::GET, format!("/{}/messages", self.queue))
            .query("peekonly", "true")
            .query(
                "numofmessages",
                count.clamp(1, MAX_GET_MESSAGES).to_string(),
            );
        let resp = self.svc.send(req).await?;
        Ok(parse_list(OP, &resp.body)?
            .messages
            .into_iter()
            .map(|m| PeekedMessage {
                message_id: m.message_id,
                dequeue_count: m.dequeue_count.unwrap_or(0),
                text: m.text.unwrap_or_default(),
            })
            .collect())
    }

    /// Extends (or shortens) a claimed message's invisibility and returns the new pop
    /// receipt; the old one stops working. With `new_text` the message text is replaced.
    /// A stale receipt gives [`Error::LostOwnership`].
    pub async fn update_message(
        &self,
        message_id: &str,
        pop_receipt: &str,
        visibility: Duration,
        new_text: Option<&str>,
    ) -> Result<String> {
        const OP: &str = "Update Message";
        let mut req = Request::new(
            OP,
            Method::PUT,
            format!("/{}/messages/{}", self.queue, encode(message_id)),
        )
        .query("popreceipt", pop_receipt)
        .query("visibilitytimeout", visibility.as_secs().to_string());
        if let Some(text) = new_text {
            let escaped = quick_xml::escape::escape(text);
            req = req.header("content-type", "application/xml").body(format!(
                "<QueueMessage><MessageText>{escaped}</MessageText></QueueMessage>"
            ));
        }
        let resp = self
            .svc
            .send(req)
            .await
            .map_err(|e| lost_ownership(OP, message_id, e))?;
        resp.header("x-ms-popreceipt")
            .map(str::to_string)
            .ok_or_else(|| Error::invalid_response(OP, "no x-ms-popreceipt header"))
    }

    /// Deletes a claimed message. A stale receipt gives [`Error::LostOwnership`] (which
    /// also happens when a retried delete had in fact succeeded).
    pub async fn delete_message(&self, message_id: &str, pop_receipt: &str) -> Result<()> {
        const OP: &str = "Delete Message";
        let req = Request::new(
            OP,
            Method::DELETE,
            format!("/{}/messages/{}", self.queue, encode(message_id)),
        )
        .query("popreceipt", pop_receipt);
        self.svc
            .send(req)
            .await
            .map(|_| ())
            .map_err(|e| lost_ownership(OP, message_id, e))
    }

    /// Removes every message.
    pub async fn clear(&self) -> Result<()> {
        let req = Request::new(
            "Clear Messages",
            Method::DELETE,
            format!("/{}/messages", self.queue),
        );
        self.svc.send(req).await.map(|_| ())
    }

    /// The service's approximate message count (includes invisible messages).
    pub async fn approximate_count(&self) -> Result<u64> {
        const OP: &str = "Get Queue Metadata";
        let req =
            Request::new(OP, Method::GET, format!("/{}", self.queue)).query("comp", "metadata");
        let resp = self.svc.send(req).await?;
        resp.header("x-ms-approximate-messages-count")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::invalid_response(OP, "no x-ms-approximate-messages-count header"))
    }
}

/// Azure says `404 MessageNotFound` for a stale receipt; Azurite says
/// `400 PopReceiptMismatch` when the message still exists. Both mean someone else owns it.
fn lost_ownership(op: &'static str, message_id: &str, e: Error) -> Error {
    match e.code() {
        Some(code @ ("MessageNotFound" | "PopReceiptMismatch")) => Error::LostOwnership {
            op,
            message_id: message_id.to_string(),
            code: code.to_string(),
        },
        _ => e,
    }
}

fn parse_list(op: &'static str, body: &[u8]) -> Result<MessagesList> {
    let text =
        std::str::from_utf8(body).map_err(|_| Error::invalid_response(op, "body is not UTF-8"))?;
    quick_xml::de::from_str(text)
        .map_err(|e| Error::invalid_response(op, format!("message list: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_message_lists() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><QueueMessagesList><QueueMessage><MessageId>id1</MessageId><InsertionTime>Sun, 22 Nov 2026 11:28:37 GMT</InsertionTime><ExpirationTime>Fri, 31 Dec 9999 23:59:59 GMT</ExpirationTime><PopReceipt>AgAAAA+/=</PopReceipt><TimeNextVisible>Sun, 22 Nov 2026 11:29:07 GMT</TimeNextVisible><DequeueCount>2</DequeueCount><MessageText>a &amp; &lt;b&gt;</MessageText></QueueMessage></QueueMessagesList>"#;
        let l = parse_list("t", xml.as_bytes()).unwrap();
        assert_eq!(l.messages.len(), 1);
        let m = &l.messages[0];
        assert_eq!(m.message_id, "id1");
        assert_eq!(m.pop_receipt.as_deref(), Some("AgAAAA+/="));
        assert_eq!(m.dequeue_count, Some(2));
        assert_eq!(m.text.as_deref(), Some("a & <b>"));
        let empty = parse_list(
            "t",
            b"<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList />",
        )
        .unwrap();
        assert!(empty.messages.is_empty());
    }

    #[test]
    fn queue_names() {
        assert!(is_valid_queue_name("tablevault-tasks"));
        for bad in ["ab", "Upper", "a--b", "-ab", "ab-", "a_b"] {
            assert!(!is_valid_queue_name(bad), "{bad}");
        }
    }

    #[test]
    fn stale_receipts_become_lost_ownership() {
        for (status, code) in [(404, "MessageNotFound"), (400, "PopReceiptMismatch")] {
            let e = Error::Service {
                op: "x",
                status,
                code: Some(code.into()),
                message: String::new(),
                retry_after: None,
            };
            assert!(matches!(
                lost_ownership("Delete Message", "m", e),
                Error::LostOwnership { .. }
            ));
        }
    }
}
