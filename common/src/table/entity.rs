//! Table entities with exact types and values, and their JSON (minimal metadata) form.
//!
//! Reading keeps every value exact: numbers are classified from their raw JSON text (never
//! through a lossy float parse), Int64 stays a string on the wire, DateTime and Guid
//! strings are kept verbatim, Binary is decoded base64. Writing always annotates Int64,
//! Double, DateTime, Guid and Binary so the service cannot guess a type.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

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

/// Length of a string as serde_json writes it: quoted, with `"` `\\` and control characters
/// escaped.
fn json_str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

fn push_json_str(out: &mut String, s: &str) {
    // serde_json escapes quotes, backslashes and control characters; the rest stays UTF-8.
    out.push_str(&serde_json::to_string(s).expect("strings always serialize"));
}

/// Why a service entity could not be read exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("property {property:?}: {reason}")]
pub struct EntityDecodeError {
    /// The property that could not be decoded.
    pub property: String,
    /// Why.
    pub reason: String,
}

/// An entity as raw JSON members; values are borrowed from the response body.
pub(crate) struct RawEntity<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for RawEntity<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawEntity<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an entity object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: &'a RawValue = map.next_value()?;
                    members.push((key, value));
                }
                Ok(RawEntity(members))
            }
        }
        deserializer.deserialize_map(V(std::marker::PhantomData))
    }
}

impl RawEntity<'_> {
    /// Resolves types and values. Unannotated JSON numbers are Int32 when integral and in
    /// range, otherwise Double (the real service returns integral doubles unannotated; see
    /// docs/FORMAT.md).
    pub(crate) fn decode(self) -> Result<Entity, EntityDecodeError> {
        let err = |p: &str, r: String| EntityDecodeError {
            property: p.to_string(),
            reason: r,
        };
        let mut annotations: Vec<(&str, EdmType)> = Vec::new();
        for (k, v) in &self.0 {
            if let Some(prop) = k.strip_suffix("@odata.type") {
                let name: String = serde_json::from_str(v.get())
                    .map_err(|e| err(prop, format!("bad type annotation: {e}")))?;
                let t = EdmType::from_name(&name)
                    .ok_or_else(|| err(prop, format!("unknown type {name:?}")))?;
                annotations.push((prop, t));
            }
        }
        let mut entity = Entity::new("", "");
        let mut have_pk = false;
        let mut have_rk = false;
        for (k, v) in &self.0 {
            let key: &str = k;
            if key.ends_with("@odata.type") {
                continue;
            }
            if key == "odata.etag" {
                entity.etag = Some(json_string(v).map_err(|e| err(key, e))?);
                continue;
            }
            if key.starts_with("odata.") {
                continue;
            }
            match key {
                "PartitionKey" => {
                    entity.partition_key = json_string(v).map_err(|e| err(key, e))?;
                    have_pk = true;
                    continue;
                }
                "RowKey" => {
                    entity.row_key = json_string(v).map_err(|e| err(key, e))?;
                    have_rk = true;
                    continue;
                }
                "Timestamp" => {
                    entity.timestamp = Some(json_string(v).map_err(|e| err(key, e))?);
                    continue;
                }
                _ => {}
            }
            let annotated = annotations.iter().find(|(p, _)| *p == key).map(|(_, t)| *t);
            if let Some(value) = decode_value(v.get(), annotated).map_err(|e| err(key, e))? {
                entity.properties.push((key.to_string(), value));
            }
        }
        if !have_pk || !have_rk {
            return Err(err(
                if have_pk { "RowKey" } else { "PartitionKey" },
                "missing from the entity".into(),
            ));
        }
        Ok(entity)
    }
}

fn json_string(v: &RawValue) -> Result<String, String> {
    serde_json::from_str::<String>(v.get()).map_err(|e| format!("expected a string: {e}"))
}

/// Decodes one raw JSON value; `None` for JSON null (the service does not store nulls).
fn decode_value(raw: &str, annotated: Option<EdmType>) -> Result<Option<EdmValue>, String> {
    let raw = raw.trim();
    if raw == "null" {
        return Ok(None);
    }
    let string =
        || serde_json::from_str::<String>(raw).map_err(|e| format!("expected a string: {e}"));
    let value = match annotated {
        Some(EdmType::String) => EdmValue::String(string()?),
        Some(EdmType::Int64) => {
            let text = if raw.starts_with('"') {
                string()?
            } else {
                raw.to_string()
            };
            EdmValue::Int64(text.parse().map_err(|_| format!("bad Int64 {text:?}"))?)
        }
        Some(EdmType::Int32) => {
            EdmValue::Int32(raw.parse().map_err(|_| format!("bad Int32 {raw:?}"))?)
        }
        Some(EdmType::Double) => {
            let text = if raw.starts_with('"') {
                string()?
            } else {
                raw.to_string()
            };
            EdmValue::Double(parse_double(&text).ok_or_else(|| format!("bad Double {text:?}"))?)
        }
        Some(EdmType::DateTime) => EdmValue::DateTime(string()?),
        Some(EdmType::Guid) => EdmValue::Guid(string()?),
        Some(EdmType::Binary) => EdmValue::Binary(
            BASE64
                .decode(string()?)
                .map_err(|e| format!("bad base64 in Binary: {e}"))?,
        ),
        Some(EdmType::Boolean) => EdmValue::Boolean(match raw {
            "true" => true,
            "false" => false,
            _ => return Err(format!("bad Boolean {raw:?}")),
        }),
        None => match raw.as_bytes().first() {
            Some(b'"') => EdmValue::String(string()?),
            Some(b't') if raw == "true" => EdmValue::Boolean(true),
            Some(b'f') if raw == "false" => EdmValue::Boolean(false),
            Some(b'-' | b'0'..=b'9') => {
                // "-0" has no Int32 meaning: only a double can be negative zero.
                let integral = !raw.contains(['.', 'e', 'E']) && raw != "-0";
                match raw.parse::<i32>() {
                    Ok(i) if integral => EdmValue::Int32(i),
                    _ => EdmValue::Double(
                        parse_double(raw).ok_or_else(|| format!("bad number {raw:?}"))?,
                    ),
                }
            }
            _ => return Err(format!("unsupported JSON value {raw:?}")),
        },
    };
    Ok(Some(value))
}

/// Parses one entity from a JSON object (a point read or an insert response).
pub fn entity_from_json(json: &str) -> Result<Entity, EntityDecodeError> {
    let raw: RawEntity<'_> = serde_json::from_str(json).map_err(|e| EntityDecodeError {
        property: String::new(),
        reason: format!("not a JSON object: {e}"),
    })?;
    raw.decode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_type_from_minimal_metadata() {
        let json = r#"{"odata.metadata":"m","odata.etag":"W/\"datetime'2026'\"",
 "PartitionKey":"p1","RowKey":"r1","S":"x","Empty":"","I32":5,
 "I64@odata.type":"Edm.Int64","I64":"9223372036854775807",
 "D2":2.5,"D3@odata.type":"Edm.Double","D3":"NaN","D5":3.0,"B":true,
 "G@odata.type":"Edm.Guid","G":"c9da6455-213d-42c9-9a79-3e9149a57833",
 "Bin@odata.type":"Edm.Binary","Bin":"AQID",
 "DT7@odata.type":"Edm.DateTime","DT7":"2024-01-02T03:04:05.1234567Z",
 "Big":3000000000,"Tiny":1e-310,"N":null,"NegZero":-0,
 "Timestamp":"2026-11-22T11:27:48.7518390Z"}"#;
        let e = entity_from_json(json).unwrap();
        assert_eq!((e.partition_key.as_str(), e.row_key.as_str()), ("p1", "r1"));
        assert_eq!(e.timestamp.as_deref(), Some("2026-11-22T11:27:48.7518390Z"));
        assert_eq!(e.etag.as_deref(), Some("W/\"datetime'2026'\""));
        assert_eq!(e.get("S"), Some(&EdmValue::String("x".into())));
        assert_eq!(e.get("Empty"), Some(&EdmValue::String("".into())));
        assert_eq!(e.get("I32"), Some(&EdmValue::Int32(5)));
        assert_eq!(e.get("I64"), Some(&EdmValue::Int64(i64::MAX)));
        assert_eq!(e.get("D2"), Some(&EdmValue::Double(2.5)));
        assert_eq!(e.get("D3"), Some(&EdmValue::Double(f64::NAN)));
        assert_eq!(e.get("D5"), Some(&EdmValue::Double(3.0)));
        assert_eq!(e.get("B"), Some(&EdmValue::Boolean(true)));
        assert_eq!(e.get("Bin"), Some(&EdmValue::Binary(vec![1, 2, 3])));
        assert_eq!(
            e.get("DT7"),
            Some(&EdmValue::DateTime("2024-01-02T03:04:05.1234567Z".into()))
        );
        assert_eq!(e.get("Big"), Some(&EdmValue::Double(3e9)));
        assert_eq!(e.get("Tiny"), Some(&EdmValue::Double(1e-310)));
        assert_eq!(e.get("N"), None);
        assert_eq!(e.get("NegZero"), Some(&EdmValue::Double(-0.0)));
        assert_eq!(e.properties.len(), 14);
    }

    #[test]
    fn doubles_round_trip_bit_for_bit() {
        let cases = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            2.225_073_858_507_201e-308, // the largest subnormal
            f64::MAX,
            f64::MIN,
            0.1,
            1e21,
            123456789012345680.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        for d in cases {
            let text = format_double(d);
            let back = parse_double(&text).unwrap();
            assert_eq!(
                EdmValue::Double(d),
                EdmValue::Double(back),
                "{d:?} -> {text} -> {back:?}"
            );
        }
        assert_eq!(parse_double("inf"), None);
        assert_eq!(parse_double("nan"), None);
    }

    #[test]
    fn to_json_annotates_and_reads_back() {
        let e = Entity::new("p'\"\\", "r\u{1}\r\n")
            .with("S", EdmValue::String("a\u{0}b\u{FFFF}".into()))
            .with("I64", EdmValue::Int64(i64::MIN))
            .with("I32", EdmValue::Int32(-7))
            .with("D", EdmValue::Double(-0.0))
            .with("Inf", EdmValue::Double(f64::NEG_INFINITY))
            .with("B", EdmValue::Boolean(false))
            .with(
                "G",
                EdmValue::Guid("00000000-0000-0000-0000-000000000000".into()),
            )
            .with("Bin", EdmValue::Binary(vec![0, 255]))
            .with(
                "T",
                EdmValue::DateTime("9999-12-31T23:59:59.9999999Z".into()),
            );
        let json = e.to_json();
        assert_eq!(e.json_len(), json.len());
        assert!(!json.contains('\n'), "one line: {json}");
        assert!(json.contains(r#""I64@odata.type":"Edm.Int64","I64":"-9223372036854775808""#));
        assert!(json.contains(r#""D@odata.type":"Edm.Double","D":-0.0"#));
        assert!(json.contains(r#""Inf@odata.type":"Edm.Double","Inf":"-Infinity""#));
        assert!(!json.contains("I32@odata.type"));
        let back = entity_from_json(&json).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn data_comparison_ignores_order_and_service_metadata() {
        let a = Entity::new("p", "r")
            .with("A", EdmValue::Int32(1))
            .with("B", EdmValue::Double(f64::NAN));
        let mut b = Entity::new("p", "r")
            .with("B", EdmValue::Double(f64::NAN))
            .with("A", EdmValue::Int32(1));
        b.timestamp = Some("2026-01-01T00:00:00.0000000Z".into());
        b.etag = Some("W/\"x\"".into());
        assert!(a.same_data(&b));
        let c = Entity::new("p", "r")
            .with("A", EdmValue::Int64(1))
            .with("C", EdmValue::Boolean(true));
        assert_eq!(a.differences(&c), vec!["A", "B", "C"]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(entity_from_json(r#"{"PartitionKey":"p"}"#).is_err());
        assert!(
            entity_from_json(
                r#"{"PartitionKey":"p","RowKey":"r","X@odata.type":"Edm.Nope","X":1}"#
            )
            .is_err()
        );
        assert!(
            entity_from_json(
                r#"{"PartitionKey":"p","RowKey":"r","X@odata.type":"Edm.Int64","X":"12a"}"#
            )
            .is_err()
        );
        assert!(entity_from_json(r#"{"PartitionKey":"p","RowKey":"r","X":[1]}"#).is_err());
        assert!(entity_from_json("[]").is_err());
    }
}
