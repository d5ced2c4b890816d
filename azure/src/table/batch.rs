//! Entity group transactions (`$batch`): the multipart request body and a tolerant parser
//! for the multipart response, which reports which operation failed and why.
//!
//! The service answers `202` even when the change set fails; the failure is inside, as the
//! only part, with the failing operation's zero-based index as the prefix of its message.

use super::entity::Entity;
use crate::error::Error;

/// Most operations one change set may hold.
pub const MAX_BATCH_OPERATIONS: usize = 100;
/// Largest request body the service accepts for a batch.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// One operation of a change set. All operations of a batch must share a PartitionKey and
/// touch distinct entities.
#[derive(Debug, Clone)]
pub enum BatchOperation {
    /// Insert; fails with `EntityAlreadyExists` if the entity exists.
    Insert(Entity),
    /// Insert or replace (PUT without `If-Match`): idempotent.
    InsertOrReplace(Entity),
    /// Insert or merge (MERGE without `If-Match`): idempotent.
    InsertOrMerge(Entity),
    /// Delete whatever version exists (`If-Match: *`).
    Delete {
        /// PartitionKey.
        partition_key: String,
        /// RowKey.
        row_key: String,
    },
}

impl BatchOperation {
    /// The entity the operation writes; `None` for a deletion.
    pub fn into_entity(self) -> Option<Entity> {
        match self {
            BatchOperation::Insert(e)
            | BatchOperation::InsertOrReplace(e)
            | BatchOperation::InsertOrMerge(e) => Some(e),
            BatchOperation::Delete { .. } => None,
        }
    }

    /// The keys the operation touches.
    pub fn keys(&self) -> (&str, &str) {
        match self {
            BatchOperation::Insert(e)
            | BatchOperation::InsertOrReplace(e)
            | BatchOperation::InsertOrMerge(e) => (&e.partition_key, &e.row_key),
            BatchOperation::Delete {
                partition_key,
                row_key,
            } => (partition_key, row_key),
        }
    }

    /// Whether sending the operation twice leaves the same state.
    pub fn is_idempotent(&self) -> bool {
        !matches!(self, BatchOperation::Insert(_))
    }
}

/// Whether an entity group transaction carries these keys intact to every parser known to
/// read them; entities whose keys it does not are written with single-entity requests.
///
/// The service reads a change set's sub-request URLs properly. Azurite (checked against
/// 3.x, `src/table/batch/TableBatchOrchestrator.ts`) instead takes the keys from the
/// percent-decoded URL with the JavaScript patterns `(?<=PartitionKey=')(.*)(?=',)` and
/// `(?<=RowKey=')(.+)(?='\))` (flags `gi`), then undoubles quotes; only when a pattern
/// matches nothing does it read the key from the JSON body. The patterns are greedy,
/// case-insensitive and stop at line terminators, so some legal keys come out different
/// (docs/ARCHITECTURE.md, "Emulator divergences"): a RowKey containing `',` or starting
/// with `,` stretches the PartitionKey, a PartitionKey containing `rowkey='` moves the
/// RowKey's start, a U+2028 in a key cuts a pattern short. Rather than list the classes,
/// this runs the emulator's patterns on the URL it would receive and checks both keys
/// come out as sent.
pub fn batch_carries_keys(partition_key: &str, row_key: &str) -> bool {
    // Keys without a quote, a line terminator (lead byte E2 covers U+2028/U+2029), a
    // comma or an equals sign are read back as sent: each pattern matches at its own key's
    // start and runs to the quote that closes it. (A RowKey starting with a comma, or a
    // PartitionKey ending in `rowkey=`, would form a delimiter with a key's quote.)
    let plain = |k: &str| {
        !k.bytes()
            .any(|b| matches!(b, b'\'' | b'\n' | b'\r' | 0xe2 | b',' | b'='))
    };
    (plain(partition_key) && plain(row_key)) || emulator_reads_back(partition_key, row_key)
}

/// [`batch_carries_keys`] the long way: the emulator's patterns run on the URL.
fn emulator_reads_back(partition_key: &str, row_key: &str) -> bool {
    let url = format!(
        "PartitionKey='{}',RowKey='{}')",
        partition_key.replace('\'', "''"),
        row_key.replace('\'', "''")
    );
    let read_back =
        |found: Option<&str>, sent: &str| found.is_none_or(|f| f.replace("''", "'") == sent);
    read_back(
        js_lookaround_match(&url, "partitionkey='", "',", false),
        partition_key,
    ) && read_back(js_lookaround_match(&url, "rowkey='", "')", true), row_key)
}

/// The first match of the JavaScript pattern `(?<=before)(.*)(?=after)` (`.+` when
/// `non_empty`) with flags `gi` in `text`: `.` matches anything but a line terminator,
/// `.*` is greedy, and `i` folds ASCII letters only (`before` is given in lower case).
fn js_lookaround_match<'a>(
    text: &'a str,
    before: &str,
    after: &str,
    non_empty: bool,
) -> Option<&'a str> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(before) {
        let start = from + i + before.len();
        let rest = &text[start..];
        let line = &rest[..rest
            .find(['\n', '\r', '\u{2028}', '\u{2029}'])
            .unwrap_or(rest.len())];
        if let Some(end) = line.rfind(after)
            && (end > 0 || !non_empty)
        {
            return Some(&line[..end]);
        }
        from += i + 1;
    }
    None
}

/// `table(PartitionKey='..',RowKey='..')` with quotes doubled, then percent-encoded.
pub(crate) fn entity_path(table: &str, partition_key: &str, row_key: &str) -> String {
    let mut out = String::with_capacity(table.len() + 32 + partition_key.len() + row_key.len());
    push_entity_path(&mut out, table, partition_key, row_key);
    out
}

/// Appends [`entity_path`].
fn push_entity_path(out: &mut String, table: &str, partition_key: &str, row_key: &str) {
    out.push_str(table);
    out.push_str("(PartitionKey='");
    push_key(out, partition_key);
    out.push_str("',RowKey='");
    push_key(out, row_key);
    out.push_str("')");
}

/// Appends a key with its quotes doubled, percent-encoded as [`crate::pipeline::encode`]
/// does (every byte but ASCII letters, digits and `-._~` as `%XX`), so a quote becomes
/// `%27%27`.
fn push_key(out: &mut String, key: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(key.len());
    let bytes = key.as_bytes();
    let mut clean = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            continue;
        }
        // A run of unreserved bytes is ASCII, so it starts and ends on character
        // boundaries (an empty one may not: it is skipped).
        if clean < i {
            out.push_str(&key[clean..i]);
        }
        let encoded = [b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]];
        let encoded = std::str::from_utf8(&encoded).expect("ASCII");
        out.push_str(encoded);
        if b == b'\'' {
            out.push_str(encoded);
        }
        clean = i + 1;
    }
    out.push_str(&key[clean..]);
}

/// Builds the multipart body. `base` is the absolute table endpoint (sub-request URLs must
/// be absolute).
pub(crate) fn build_body(
    base: &str,
    table: &str,
    ops: &[BatchOperation],
    batch_boundary: &str,
    changeset_boundary: &str,
) -> String {
    const PART_HEADERS: &str =
        "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n";
    const REQUEST_HEADERS: &str = " HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0;\r\n";
    let base = base.trim_end_matches('/');
    let per_op = 2 * changeset_boundary.len() + base.len() + table.len() + 300;
    let capacity = ops
        .iter()
        .map(|op| {
            let (pk, rk) = op.keys();
            let json = match op {
                BatchOperation::Delete { .. } => 0,
                BatchOperation::Insert(e)
                | BatchOperation::InsertOrReplace(e)
                | BatchOperation::InsertOrMerge(e) => e.approx_size(),
            };
            per_op + 3 * (pk.len() + rk.len()) + json
        })
        .sum::<usize>();
    let mut body = String::with_capacity(capacity + 4 * batch_boundary.len() + 128);
    body.push_str("--");
    body.push_str(batch_boundary);
    body.push_str("\r\nContent-Type: multipart/mixed; boundary=");
    body.push_str(changeset_boundary);
    body.push_str("\r\n\r\n");
    for op in ops {
        body.push_str("--");
        body.push_str(changeset_boundary);
        body.push_str(PART_HEADERS);
        let (method, entity) = match op {
            BatchOperation::Insert(e) => ("POST", Some(e)),
            BatchOperation::InsertOrReplace(e) => ("PUT", Some(e)),
            BatchOperation::InsertOrMerge(e) => ("MERGE", Some(e)),
            BatchOperation::Delete { .. } => ("DELETE", None),
        };
        body.push_str(method);
        body.push(' ');
        body.push_str(base);
        body.push('/');
        if let BatchOperation::Insert(_) = op {
            body.push_str(table);
        } else {
            let (pk, rk) = op.keys();
            push_entity_path(&mut body, table, pk, rk);
        }
        body.push_str(REQUEST_HEADERS);
        match entity {
            Some(e) => {
                body.push_str(
                    "Content-Type: application/json\r\nPrefer: return-no-content\r\n\r\n",
                );
                // One line: Azurite's regex-based parser rejects multi-line sub-request bodies.
                e.write_json(&mut body);
                body.push_str("\r\n");
            }
            None => body.push_str("If-Match: *\r\n\r\n"),
        }
    }
    body.push_str("--");
    body.push_str(changeset_boundary);
    body.push_str("--\r\n--");
    body.push_str(batch_boundary);
    body.push_str("--\r\n");
    body
}

/// Reads a batch response. `Ok` only if it holds exactly `count` successful operation
/// responses; otherwise the first failure, with its index when the service gave it.
pub(crate) fn check_response(op: &'static str, body: &[u8], count: usize) -> Result<(), Error> {
    let text = String::from_utf8_lossy(body);
    let mut statuses: Vec<(u16, usize)> = Vec::new();
    let mut search = 0;
    while let Some(pos) = find_status_line(&text[search..]) {
        let at = search + pos;
        let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        let status = text[at..line_end]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| {
                Error::invalid_response(op, "batch response has a malformed status line")
            })?;
        statuses.push((status, at));
        search = line_end;
    }
    if let Some(&(status, at)) = statuses.iter().find(|(s, _)| *s >= 300) {
        let part_body = part_body(&text, at);
        let (code, message) = crate::pipeline::parse_error_body(part_body);
        let message = message.unwrap_or_default();
        // The index is the digits before the first ':' of the message ("1:The specified...").
        let from_message = message
            .split_once(':')
            .and_then(|(n, _)| n.trim().parse::<usize>().ok());
        let from_content_id = content_id_before(&text, at).and_then(|id| id.checked_sub(1));
        let index = from_message
            .or(from_content_id)
            .or(if count == 1 { Some(0) } else { None })
            .filter(|i| *i < count);
        let message = match from_message {
            Some(_) => message.split_once(':').map(|(_, m)| m).unwrap_or(&message),
            None => &message,
        };
        return Err(Error::BatchOperation {
            op,
            index,
            status,
            code,
            message: crate::redact::redact_text(message.lines().next().unwrap_or("").trim()),
        });
    }
    if statuses.len() != count {
        return Err(Error::invalid_response(
            op,
            format!(
                "batch response has {} operation results for {count} operations",
                statuses.len()
            ),
        ));
    }
    Ok(())
}

fn find_status_line(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("HTTP/1.") {
        let at = from + i;
        if at == 0 || text.as_bytes()[at - 1] == b'\n' {
            return Some(at);
        }
        from = at + 7;
    }
    None
}

/// The body of the operation response whose status line starts at `at`: after the first
/// blank line, up to the next boundary line.
fn part_body(text: &str, at: usize) -> &str {
    let rest = &text[at..];
    let start = rest
        .find("\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| rest.find("\n\n").map(|i| i + 2))
        .unwrap_or(rest.len());
    let rest = &rest[start..];
    let end = rest.find("\n--").unwrap_or(rest.len());
    rest[..end].trim()
}

/// A `Content-ID` header in the MIME part headers just before a status line.
fn content_id_before(text: &str, at: usize) -> Option<usize> {
    let part_start = text[..at].rfind("\n--").unwrap_or(0);
    text[part_start..at].lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("content-id") {
            value.trim().parse().ok()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::entity::EdmValue;

    #[test]
    fn body_has_one_line_json_and_absolute_urls() {
        let ops = vec![
            BatchOperation::Insert(Entity::new("p", "1").with("V", EdmValue::Int32(1))),
            BatchOperation::InsertOrReplace(Entity::new("p", "o'k %")),
            BatchOperation::Delete {
                partition_key: "p".into(),
                row_key: "3".into(),
            },
        ];
        let b = build_body("http://h:1/acct", "t", &ops, "batch_B", "changeset_C");
        assert!(
            b.starts_with("--batch_B\r\nContent-Type: multipart/mixed; boundary=changeset_C\r\n")
        );
        assert!(b.contains("POST http://h:1/acct/t HTTP/1.1\r\n"));
        assert!(b.contains("\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"1\",\"V\":1}\r\n"));
        assert!(b.contains(
            "PUT http://h:1/acct/t(PartitionKey='p',RowKey='o%27%27k%20%25') HTTP/1.1\r\n"
        ));
        assert!(b.contains("DELETE http://h:1/acct/t(PartitionKey='p',RowKey='3') HTTP/1.1\r\n"));
        assert!(b.contains("If-Match: *"));
        assert!(b.ends_with("--changeset_C--\r\n--batch_B--\r\n"));
    }

    #[test]
    fn success_response() {
        let r = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
HTTP/1.1 204 No Content\r\nETag: W/\"x\"\r\n\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
HTTP/1.1 204 No Content\r\n\r\n\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n";
        check_response("Batch", r.as_bytes(), 2).unwrap();
        assert!(check_response("Batch", r.as_bytes(), 3).is_err());
    }

    #[test]
    fn failure_names_the_operation() {
        let r = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: 2\r\n\r\n\
HTTP/1.1 409 Conflict\r\nContent-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n\r\n\
{\"odata.error\":{\"code\":\"EntityAlreadyExists\",\"message\":{\"lang\":\"en-US\",\"value\":\"1:The specified entity already exists.\\nRequestId:abc\"}}}\r\n\
--changesetresponse_2--\r\n--batchresponse_1--\r\n";
        let e = check_response("Batch", r.as_bytes(), 3).unwrap_err();
        match e {
            Error::BatchOperation {
                index,
                status,
                code,
                message,
                ..
            } => {
                assert_eq!(index, Some(1));
                assert_eq!(status, 409);
                assert_eq!(code.as_deref(), Some("EntityAlreadyExists"));
                assert_eq!(message, "The specified entity already exists.");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn malformed_boundary_is_tolerated_and_garbage_is_an_error() {
        // Azurite's 101-operation answer drops the "--" of a boundary line.
        let r = "batchresponse_1\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 400 Bad Request\r\n\r\n\
{\"odata.error\":{\"code\":\"InvalidInput\",\"message\":{\"lang\":\"en-US\",\"value\":\"0:The batch request operation exceeds the maximum 100 changes per change set.\"}}}\r\n";
        let e = check_response("Batch", r.as_bytes(), 101).unwrap_err();
        assert_eq!(e.code(), Some("InvalidInput"));
        let e = check_response("Batch", b"not multipart at all", 1).unwrap_err();
        assert!(matches!(e, Error::InvalidResponse { .. }), "{e}");
    }

    /// The body as it was built before it was written in place: the reference.
    fn reference_body(
        base: &str,
        table: &str,
        ops: &[BatchOperation],
        batch_boundary: &str,
        changeset_boundary: &str,
    ) -> String {
        let path = |pk: &str, rk: &str| {
            format!(
                "{table}(PartitionKey='{}',RowKey='{}')",
                crate::pipeline::encode(&pk.replace('\'', "''")),
                crate::pipeline::encode(&rk.replace('\'', "''"))
            )
        };
        let base = base.trim_end_matches('/');
        let mut body = format!(
            "--{batch_boundary}\r\nContent-Type: multipart/mixed; boundary={changeset_boundary}\r\n\r\n"
        );
        for op in ops {
            body.push_str(&format!(
                "--{changeset_boundary}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
            ));
            let (method, url, json) = match op {
                BatchOperation::Insert(e) => ("POST", format!("{base}/{table}"), Some(e.to_json())),
                BatchOperation::InsertOrReplace(e) => (
                    "PUT",
                    format!("{base}/{}", path(&e.partition_key, &e.row_key)),
                    Some(e.to_json()),
                ),
                BatchOperation::InsertOrMerge(e) => (
                    "MERGE",
                    format!("{base}/{}", path(&e.partition_key, &e.row_key)),
                    Some(e.to_json()),
                ),
                BatchOperation::Delete {
                    partition_key,
                    row_key,
                } => (
                    "DELETE",
                    format!("{base}/{}", path(partition_key, row_key)),
                    None,
                ),
            };
            body.push_str(&format!(
                "{method} {url} HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0;\r\n"
            ));
            match json {
                Some(json) => {
                    body.push_str(
                        "Content-Type: application/json\r\nPrefer: return-no-content\r\n\r\n",
                    );
                    body.push_str(&json);
                    body.push_str("\r\n");
                }
                None => body.push_str("If-Match: *\r\n\r\n"),
            }
        }
        body.push_str(&format!(
            "--{changeset_boundary}--\r\n--{batch_boundary}--\r\n"
        ));
        body
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn key() -> impl Strategy<Value = String> {
            let nasty = prop_oneof![
                Just('\''),
                Just(','),
                Just(')'),
                Just('='),
                Just('%'),
                Just(' '),
                Just('\n'),
                Just('\r'),
                Just('\u{2028}'),
                Just('\u{2029}'),
                Just('\u{2027}'),
                Just('é'),
            ];
            let words = prop_oneof![
                Just("RowKey='".to_string()),
                Just("rowkey=".to_string()),
                Just("partitionkey='".to_string()),
                Just("',".to_string()),
                Just("')".to_string()),
            ];
            proptest::collection::vec(
                prop_oneof![
                    3 => any::<char>().prop_map(String::from),
                    3 => nasty.prop_map(String::from),
                    1 => words,
                ],
                0..8,
            )
            .prop_map(|parts| parts.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn the_quick_key_check_agrees_with_the_emulators_patterns(pk in key(), rk in key()) {
                prop_assert_eq!(batch_carries_keys(&pk, &rk), emulator_reads_back(&pk, &rk));
            }

            #[test]
            fn bodies_are_what_they_were(
                keys in proptest::collection::vec((key(), key(), 0..4u8), 1..6),
                s in ".{0,12}",
                n in any::<i64>(),
                bits in any::<u64>(),
            ) {
                let ops: Vec<BatchOperation> = keys
                    .into_iter()
                    .map(|(pk, rk, kind)| {
                        let e = Entity::new(pk.clone(), rk.clone())
                            .with(&s, EdmValue::String(s.clone()))
                            .with("N", EdmValue::Int64(n))
                            .with("I", EdmValue::Int32(n as i32))
                            .with("D", EdmValue::Double(f64::from_bits(bits)))
                            .with("B", EdmValue::Binary(s.clone().into_bytes()));
                        match kind {
                            0 => BatchOperation::Insert(e),
                            1 => BatchOperation::InsertOrReplace(e),
                            2 => BatchOperation::InsertOrMerge(e),
                            _ => BatchOperation::Delete { partition_key: pk, row_key: rk },
                        }
                    })
                    .collect();
                for base in ["http://h:1/acct", "https://a.table.core.windows.net/"] {
                    prop_assert_eq!(
                        build_body(base, "Tbl", &ops, "batch_B", "changeset_C"),
                        reference_body(base, "Tbl", &ops, "batch_B", "changeset_C")
                    );
                }
            }
        }
    }

    #[test]
    fn keys_the_emulators_batch_parser_misreads_are_kept_out_of_batches() {
        for (pk, rk) in [
            ("customer-1", "order-1"),
            ("O'Brien", "it's"),
            ("a',b", "x"),
            ("", ""),
            ("pk", "')"),
            ("RowKey", "RowKey="),
            ("50%+1 ", "(a,b)"),
            ("a\u{2028}b", "r"),
            ("p", "r\u{2029}"),
        ] {
            assert!(batch_carries_keys(pk, rk), "{pk:?}/{rk:?}");
        }
        for (pk, rk) in [
            ("p", "a',b"),
            ("p", "',"),
            ("x RowKey='y", "r"),
            ("ROWKEY=", "r"),
            ("rowkey='", "r"),
            ("", ","),
            ("p", ",x"),
        ] {
            assert!(!batch_carries_keys(pk, rk), "{pk:?}/{rk:?}");
        }
    }
}
