//! One attempt at one task, per kind of job. An attempt owns nothing but what it writes
//! under its own attempt id; it ends by committing a record create-only, so redelivered
//! and racing attempts of one task cannot both win.

pub mod backup;
pub mod restore;

/// A fresh attempt id: 32 hex digits.
pub(crate) fn new_attempt_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
