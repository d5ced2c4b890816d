//! Reading entities from the service's JSON (minimal metadata) exactly: numbers are
//! classified from their raw text, annotated types are honoured, nulls are dropped.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{EdmType, EdmValue, Entity, parse_double};

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
