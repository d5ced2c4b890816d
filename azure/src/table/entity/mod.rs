//! Table entities with exact types and values, and their JSON (minimal metadata) form.
//!
//! Reading keeps every value exact: numbers are classified from their raw JSON text (never
//! through a lossy float parse), Int64 stays a string on the wire, DateTime and Guid
//! strings are kept verbatim, Binary is decoded base64. Writing always annotates Int64,
//! Double, DateTime, Guid and Binary so the service cannot guess a type.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// The eight Edm types of Azure Table storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdmType {
    /// UTF-16 string up to 64 KiB.
    String,
    /// true / false.
    Boolean,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer (a JSON string on the wire).
    Int64,
    /// IEEE 754 double, including NaN and infinities.
    Double,
    /// UTC date-time with up to 7 fractional digits.
    DateTime,
    /// GUID.
    Guid,
    /// Byte array up to 64 KiB.
    Binary,
}

impl EdmType {
    /// The OData type name, e.g. `Edm.Int64`.
    pub fn name(self) -> &'static str {
        match self {
            EdmType::String => "Edm.String",
            EdmType::Boolean => "Edm.Boolean",
            EdmType::Int32 => "Edm.Int32",
            EdmType::Int64 => "Edm.Int64",
            EdmType::Double => "Edm.Double",
            EdmType::DateTime => "Edm.DateTime",
            EdmType::Guid => "Edm.Guid",
            EdmType::Binary => "Edm.Binary",
        }
    }

    /// Parses an OData type name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "Edm.String" => EdmType::String,
            "Edm.Boolean" => EdmType::Boolean,
            "Edm.Int32" => EdmType::Int32,
            "Edm.Int64" => EdmType::Int64,
            "Edm.Double" => EdmType::Double,
            "Edm.DateTime" => EdmType::DateTime,
            "Edm.Guid" => EdmType::Guid,
            "Edm.Binary" => EdmType::Binary,
            _ => return None,
        })
    }
}

/// A typed property value.
///
/// Equality is exact: doubles compare by bit pattern (so `NaN == NaN` and `0.0 != -0.0`),
/// which is what "the backup is identical" means.
#[derive(Debug, Clone)]
pub enum EdmValue {
    /// A string.
    String(String),
    /// A boolean.
    Boolean(bool),
    /// A 32-bit integer.
    Int32(i32),
    /// A 64-bit integer.
    Int64(i64),
    /// A double.
    Double(f64),
    /// A date-time, kept as the service's text (e.g. `2024-01-02T03:04:05.1234567Z`).
    DateTime(String),
    /// A GUID, kept as the service's text.
    Guid(String),
    /// Bytes.
    Binary(Vec<u8>),
}

impl PartialEq for EdmValue {
    fn eq(&self, other: &Self) -> bool {
        use EdmValue::*;
        match (self, other) {
            (String(a), String(b)) | (DateTime(a), DateTime(b)) | (Guid(a), Guid(b)) => a == b,
            (Boolean(a), Boolean(b)) => a == b,
            (Int32(a), Int32(b)) => a == b,
            (Int64(a), Int64(b)) => a == b,
            (Double(a), Double(b)) => a.to_bits() == b.to_bits(),
            (Binary(a), Binary(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for EdmValue {}

impl EdmValue {
    /// The value's Edm type.
    pub fn edm_type(&self) -> EdmType {
        match self {
            EdmValue::String(_) => EdmType::String,
            EdmValue::Boolean(_) => EdmType::Boolean,
            EdmValue::Int32(_) => EdmType::Int32,
            EdmValue::Int64(_) => EdmType::Int64,
            EdmValue::Double(_) => EdmType::Double,
            EdmValue::DateTime(_) => EdmType::DateTime,
            EdmValue::Guid(_) => EdmType::Guid,
            EdmValue::Binary(_) => EdmType::Binary,
        }
    }

    /// Approximate stored size in bytes, used to keep batches under the 4 MiB limit.
    pub fn approx_size(&self) -> usize {
        match self {
            EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => s.len(),
            EdmValue::Binary(b) => b.len().div_ceil(3) * 4,
            _ => 8,
        }
    }
}

/// Formats a double so that parsing the text gives back the same bits: the shortest
/// round-trip decimal for finite values (`-0.0`, `1e-310`, `1.0`), and the service's words
/// for the others.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        "NaN".to_string()
    } else if d == f64::INFINITY {
        "Infinity".to_string()
    } else if d == f64::NEG_INFINITY {
        "-Infinity".to_string()
    } else {
        format!("{d:?}")
    }
}

/// Parses what [`format_double`] writes, plus the forms the service returns (`INF`, plain
/// integers, exponents).
pub fn parse_double(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "Infinity" | "INF" => Some(f64::INFINITY),
        "-Infinity" | "-INF" => Some(f64::NEG_INFINITY),
        t => {
            // Rust's parser accepts "inf"/"nan" spellings the service never sends; refuse
            // them so that only numbers and the three words above are valid.
            if t.bytes()
                .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E')
            {
                None
            } else {
                t.parse().ok()
            }
        }
    }
}

/// One entity: its keys, the service's system metadata, and its properties in the order
/// the service returned them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// PartitionKey.
    pub partition_key: String,
    /// RowKey.
    pub row_key: String,
    /// The service's `Timestamp` (read-only; never written back).
    pub timestamp: Option<String>,
    /// The service's ETag (read-only; never written back).
    pub etag: Option<String>,
    /// The other properties.
    pub properties: Vec<(String, EdmValue)>,
}

impl Entity {
    /// An entity with keys and no properties.
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> Self {
        Entity {
            partition_key: partition_key.into(),
            row_key: row_key.into(),
            timestamp: None,
            etag: None,
            properties: Vec::new(),
        }
    }

    /// Adds a property (builder style).
    pub fn with(mut self, name: impl Into<String>, value: EdmValue) -> Self {
        self.properties.push((name.into(), value));
        self
    }

    /// Looks a property up by name.
    pub fn get(&self, name: &str) -> Option<&EdmValue> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// Whether two entities hold the same data: keys, and the same properties with the
    /// same types and exact values, in any order. Timestamp and ETag are the service's
    /// bookkeeping and are not compared.
    pub fn same_data(&self, other: &Entity) -> bool {
        self.differences(other).is_empty()
    }

    /// Names of the properties that differ (missing on either side, or a different type
    /// or value), sorted; `PartitionKey`/`RowKey` if the keys differ.
    pub fn differences(&self, other: &Entity) -> Vec<String> {
        let mut out = Vec::new();
        if self.partition_key != other.partition_key {
            out.push("PartitionKey".to_string());
        }
        if self.row_key != other.row_key {
            out.push("RowKey".to_string());
        }
        for (name, value) in &self.properties {
            if other.get(name) != Some(value) {
                out.push(name.clone());
            }
        }
        for (name, _) in &other.properties {
            if self.get(name).is_none() {
                out.push(name.clone());
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Approximate serialized size, for preallocating buffers.
    pub fn approx_size(&self) -> usize {
        64 + self.partition_key.len()
            + self.row_key.len()
            + self
                .properties
                .iter()
                .map(|(n, v)| n.len() * 2 + 32 + v.approx_size())
                .sum::<usize>()
    }

    /// The exact length of [`to_json`](Self::to_json), computed without building it, so
    /// batches can be kept under the service's 4 MiB request limit.
    pub fn json_len(&self) -> usize {
        let mut n = 2 + json_str_len("PartitionKey") + 1 + json_str_len(&self.partition_key);
        n += 1 + json_str_len("RowKey") + 1 + json_str_len(&self.row_key);
        for (name, value) in &self.properties {
            if !matches!(
                value,
                EdmValue::String(_) | EdmValue::Boolean(_) | EdmValue::Int32(_)
            ) {
                // ,"name@odata.type":"Edm.X"
                n += 1
                    + json_str_len(name)
                    + "@odata.type".len()
                    + 1
                    + value.edm_type().name().len()
                    + 2;
            }
            n += 1 + json_str_len(name) + 1;
            n += match value {
                EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => json_str_len(s),
                EdmValue::Boolean(b) => {
                    if *b {
                        4
                    } else {
                        5
                    }
                }
                EdmValue::Int32(i) => i.to_string().len(),
                EdmValue::Int64(i) => i.to_string().len() + 2,
                EdmValue::Double(d) if d.is_finite() => format_double(*d).len(),
                EdmValue::Double(d) => format_double(*d).len() + 2,
                EdmValue::Binary(b) => b.len().div_ceil(3) * 4 + 2,
            };
        }
        n
    }

    /// The JSON body for an insert or upsert: keys, then every property with the type
    /// annotation the service needs. Timestamp and ETag are left out (the service sets
    /// them). The body is one line, as Azurite's batch parser requires.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(self.approx_size());
        out.push('{');
        push_json_str(&mut out, "PartitionKey");
        out.push(':');
        push_json_str(&mut out, &self.partition_key);
        out.push(',');
        push_json_str(&mut out, "RowKey");
        out.push(':');
        push_json_str(&mut out, &self.row_key);
        for (name, value) in &self.properties {
            let annotate = !matches!(
                value,
                EdmValue::String(_) | EdmValue::Boolean(_) | EdmValue::Int32(_)
            );
            if annotate {
                out.push(',');
                push_json_str(&mut out, &format!("{name}@odata.type"));
                out.push(':');
                push_json_str(&mut out, value.edm_type().name());
            }
            out.push(',');
            push_json_str(&mut out, name);
            out.push(':');
            match value {
                EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => {
                    push_json_str(&mut out, s)
                }
                EdmValue::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
                EdmValue::Int32(i) => out.push_str(&i.to_string()),
                EdmValue::Int64(i) => push_json_str(&mut out, &i.to_string()),
                // Finite doubles are JSON numbers, as every SDK writes them; only NaN and
                // the infinities, which JSON cannot spell, are strings.
                EdmValue::Double(d) if d.is_finite() => out.push_str(&format_double(*d)),
                EdmValue::Double(d) => push_json_str(&mut out, &format_double(*d)),
                EdmValue::Binary(b) => push_json_str(&mut out, &BASE64.encode(b)),
            }
        }
        out.push('}');
        out
    }
}

/// Length of a string as [`push_json_str`] writes it: quoted, with `"` `\\` and control
/// characters escaped, and U+2028/U+2029 as `\u2028`/`\u2029`.
fn json_str_len(s: &str) -> usize {
    let separators = s.matches(['\u{2028}', '\u{2029}']).count();
    2 + separators * 3
        + s.bytes()
            .map(|b| match b {
                b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
                0..=0x1f => 6,
                _ => 1,
            })
            .sum::<usize>()
}

/// Writes a JSON string. serde_json escapes quotes, backslashes and control characters;
/// the line and paragraph separators U+2028/U+2029 are escaped too, although JSON allows
/// them raw: parsers that find a body with line-based regular expressions (Azurite's
/// entity-group-transaction parser, see docs/ARCHITECTURE.md) stop at them.
fn push_json_str(out: &mut String, s: &str) {
    let json = serde_json::to_string(s).expect("strings always serialize");
    if json.contains(['\u{2028}', '\u{2029}']) {
        out.push_str(
            &json
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029"),
        );
    } else {
        out.push_str(&json);
    }
}

mod decode;

pub(crate) use decode::RawEntity;
pub use decode::{EntityDecodeError, entity_from_json};

#[cfg(test)]
mod tests;
