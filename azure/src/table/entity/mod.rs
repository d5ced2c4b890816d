//! Table entities with exact types and values, and their JSON (minimal metadata) form.
//!
//! Reading keeps every value exact: numbers are classified from their raw JSON text (never
//! through a lossy float parse), Int64 stays a string on the wire, DateTime and Guid
//! strings are kept verbatim, Binary is decoded base64. Writing always annotates Int64,
//! Double, DateTime, Guid and Binary so the service cannot guess a type.

use std::fmt::{self, Write as _};

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
    let mut out = String::new();
    write_double(&mut out, d);
    out
}

/// Appends what [`format_double`] returns, without allocating.
pub fn write_double(out: &mut String, d: f64) {
    if d.is_nan() {
        out.push_str("NaN");
    } else if d == f64::INFINITY {
        out.push_str("Infinity");
    } else if d == f64::NEG_INFINITY {
        out.push_str("-Infinity");
    } else {
        // Writing to a String cannot fail.
        let _ = write!(out, "{d:?}");
    }
}

/// Length of what [`format_double`] returns, without allocating.
fn double_len(d: f64) -> usize {
    if d.is_nan() {
        3
    } else if d == f64::INFINITY {
        8
    } else if d == f64::NEG_INFINITY {
        9
    } else {
        let mut count = CountingWriter(0);
        let _ = write!(count, "{d:?}");
        count.0
    }
}

/// A `fmt::Write` that only counts bytes.
struct CountingWriter(usize);

impl fmt::Write for CountingWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Appends an integer in decimal (what `{}` writes), without the formatting machinery.
pub fn write_int(out: &mut String, i: i64) {
    let mut digits = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if i < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

/// Number of characters of an integer in decimal, sign included.
fn decimal_len(i: i64) -> usize {
    let mut n = i.unsigned_abs();
    let mut len = usize::from(i < 0) + 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
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
            let name_len = json_str_len(name);
            if annotated(value) {
                // ,"name@odata.type":"Edm.X"
                n += 1 + name_len + "@odata.type".len() + 1 + value.edm_type().name().len() + 2;
            }
            n += 1 + name_len + 1;
            n += match value {
                EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => json_str_len(s),
                EdmValue::Boolean(b) => {
                    if *b {
                        4
                    } else {
                        5
                    }
                }
                EdmValue::Int32(i) => decimal_len(i64::from(*i)),
                EdmValue::Int64(i) => decimal_len(*i) + 2,
                EdmValue::Double(d) if d.is_finite() => double_len(*d),
                EdmValue::Double(d) => double_len(*d) + 2,
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
        self.write_json(&mut out);
        out
    }

    /// Appends [`to_json`](Self::to_json) to `out`.
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"PartitionKey\":");
        push_json_str(out, &self.partition_key);
        out.push_str(",\"RowKey\":");
        push_json_str(out, &self.row_key);
        for (name, value) in &self.properties {
            if annotated(value) {
                // The annotation's name is the property's name with a suffix, inside one
                // JSON string.
                out.push(',');
                push_json_str(out, name);
                out.pop();
                out.push_str("@odata.type\":\"");
                out.push_str(value.edm_type().name());
                out.push('"');
            }
            out.push(',');
            push_json_str(out, name);
            out.push(':');
            match value {
                EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => {
                    push_json_str(out, s)
                }
                EdmValue::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
                EdmValue::Int32(i) => write_int(out, i64::from(*i)),
                EdmValue::Int64(i) => {
                    out.push('"');
                    write_int(out, *i);
                    out.push('"');
                }
                // Finite doubles are JSON numbers, as every SDK writes them; only NaN and
                // the infinities, which JSON cannot spell, are strings.
                EdmValue::Double(d) if d.is_finite() => write_double(out, *d),
                EdmValue::Double(d) => {
                    out.push('"');
                    write_double(out, *d);
                    out.push('"');
                }
                EdmValue::Binary(b) => {
                    // Base64 needs no JSON escapes.
                    out.push('"');
                    BASE64.encode_string(b, out);
                    out.push('"');
                }
            }
        }
        out.push('}');
    }
}

/// Whether the JSON of a value carries an `@odata.type` annotation: all but the types
/// JSON itself tells apart (a string, a boolean, an integer the service reads as Int32).
fn annotated(value: &EdmValue) -> bool {
    !matches!(
        value,
        EdmValue::String(_) | EdmValue::Boolean(_) | EdmValue::Int32(_)
    )
}

/// Bytes [`push_json_str`] looks at: `"`, `\\`, the C0 controls, and E2 (the lead byte
/// of U+2028/U+2029). Everything else is copied as it is.
static JSON_SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[0xe2] = true;
    t
};

/// Length of a string as [`push_json_str`] writes it: quoted, with `"` `\\` and control
/// characters escaped, and U+2028/U+2029 as `\u2028`/`\u2029`.
fn json_str_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut n = 2 + bytes.len();
    for (i, &b) in bytes.iter().enumerate() {
        if JSON_SPECIAL[usize::from(b)] {
            n += match b {
                b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
                0..=0x1f => 5,
                // U+2028 and U+2029 (E2 80 A8/A9): three bytes become six characters.
                0xe2 if is_separator(bytes, i) => 3,
                _ => 0,
            };
        }
    }
    n
}

/// Whether the UTF-8 sequence starting at `bytes[i]` (an E2 lead byte) is U+2028 or U+2029.
fn is_separator(bytes: &[u8], i: usize) -> bool {
    bytes.get(i + 1) == Some(&0x80) && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9))
}

/// Writes a JSON string the way serde_json does (quotes, backslashes and control
/// characters escaped, the short forms where JSON has them, `\u00xx` otherwise), and
/// also escapes the line and paragraph separators U+2028/U+2029, which JSON allows raw:
/// parsers that find a body with line-based regular expressions (Azurite's
/// entity-group-transaction parser, see docs/ARCHITECTURE.md) stop at them.
fn push_json_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    let mut clean = 0;
    let mut i = 0;
    loop {
        while i < bytes.len() && !JSON_SPECIAL[usize::from(bytes[i])] {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let b = bytes[i];
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ if is_separator(bytes, i) => {
                if bytes[i + 2] == 0xa8 {
                    "\\u2028"
                } else {
                    "\\u2029"
                }
            }
            // Another character starting with E2: copied with the clean run.
            _ => {
                i += 1;
                continue;
            }
        };
        // Every split point is an ASCII byte or a character's lead byte.
        out.push_str(&s[clean..i]);
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(short);
        }
        i += if b == 0xe2 { 3 } else { 1 };
        clean = i;
    }
    out.push_str(&s[clean..]);
    out.push('"');
}

mod decode;
mod page;

pub(crate) use decode::decode_page;
pub use decode::{EntityDecodeError, entity_from_json};

#[cfg(test)]
mod tests;
