//! Reading entities from the service's JSON (minimal metadata) exactly: numbers are
//! classified from their raw text, annotated types are honoured, nulls are dropped.

use std::borrow::Cow;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
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

/// An entity as raw JSON members: names, and the JSON text of the values (scalars, with
/// no surrounding whitespace), borrowed from the response body (a name is copied only when
/// it has escapes).
pub(super) type Members<'a> = Vec<(Cow<'a, str>, &'a str)>;

/// A member name, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(V(PhantomData))
    }
}

/// Reads one entity object into a members buffer (cleared first), so a page reuses one.
struct MembersSeed<'m, 'a>(&'m mut Members<'a>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for MembersSeed<'_, 'a> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for MembersSeed<'_, 'a> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an entity object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.clear();
        while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
            let value: &'a RawValue = map.next_value()?;
            self.0.push((key, value.get()));
        }
        Ok(())
    }
}

/// The entities of a Query Entities response body (`{"value":[…], …}`), decoded as they
/// are parsed. The outer error is the body's JSON; the inner one the first entity that
/// could not be decoded (reported only if the whole body is valid JSON).
pub(crate) fn decode_page(
    text: &str,
) -> Result<Result<Vec<Entity>, EntityDecodeError>, serde_json::Error> {
    // Pages as the service writes them are read by a scanner of that shape, which gives
    // up (returning nothing) at anything else; serde_json reads the rest and words the
    // errors.
    match super::page::decode(text) {
        Some(entities) => Ok(entities),
        None => decode_page_with_serde(text),
    }
}

/// [`decode_page`] with serde_json: any JSON, and the errors.
pub(super) fn decode_page_with_serde(
    text: &str,
) -> Result<Result<Vec<Entity>, EntityDecodeError>, serde_json::Error> {
    let mut page = Page {
        entities: Vec::with_capacity((text.len() / 256).min(1000)),
        members: Vec::new(),
        error: None,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    PageSeed(&mut page).deserialize(&mut de)?;
    de.end()?;
    Ok(match page.error {
        Some(e) => Err(e),
        None => Ok(page.entities),
    })
}

struct Page<'a> {
    entities: Vec<Entity>,
    members: Members<'a>,
    error: Option<EntityDecodeError>,
}

/// The page object: its `value` member is read by [`EntitiesSeed`], the others skipped
/// (what `#[derive(Deserialize)] struct PageBody { value: Vec<…> }` accepts).
struct PageSeed<'p, 'a>(&'p mut Page<'a>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for PageSeed<'_, 'a> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_struct("PageBody", &["value"], self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for PageSeed<'_, 'a> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct PageBody")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = false;
        while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
            if key == "value" {
                if seen {
                    return Err(de::Error::duplicate_field("value"));
                }
                seen = true;
                map.next_value_seed(EntitiesSeed(&mut *self.0))?;
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        if seen {
            Ok(())
        } else {
            Err(de::Error::missing_field("value"))
        }
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match seq.next_element_seed(EntitiesSeed(&mut *self.0))? {
            Some(()) => Ok(()),
            None => Err(de::Error::invalid_length(
                0,
                &"struct PageBody with 1 element",
            )),
        }
    }
}

/// The `value` array: each entity is decoded as soon as it is read, reusing one members
/// buffer. After a decode error the rest is only parsed (the JSON may still be invalid).
struct EntitiesSeed<'p, 'a>(&'p mut Page<'a>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for EntitiesSeed<'_, 'a> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for EntitiesSeed<'_, 'a> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let page = self.0;
        while seq
            .next_element_seed(MembersSeed(&mut page.members))?
            .is_some()
        {
            if page.error.is_none() {
                match decode_members(&page.members) {
                    Ok(e) => page.entities.push(e),
                    Err(e) => page.error = Some(e),
                }
            }
        }
        Ok(())
    }
}

/// Resolves types and values. Unannotated JSON numbers are Int32 when integral and in
/// range, otherwise Double (the real service returns integral doubles unannotated; see
/// docs/FORMAT.md).
pub(super) fn decode_members(members: &Members<'_>) -> Result<Entity, EntityDecodeError> {
    let err = |p: &str, r: String| EntityDecodeError {
        property: p.to_string(),
        reason: r,
    };
    let mut annotations: Vec<(&str, EdmType)> = Vec::new();
    for (k, v) in members {
        if let Some(prop) = k.strip_suffix("@odata.type") {
            let name = json_str(v).map_err(|e| err(prop, format!("bad type annotation: {e}")))?;
            let t = EdmType::from_name(&name)
                .ok_or_else(|| err(prop, format!("unknown type {name:?}")))?;
            annotations.push((prop, t));
        }
    }
    let mut entity = Entity::new("", "");
    entity.properties.reserve(members.len() - annotations.len());
    let mut have_pk = false;
    let mut have_rk = false;
    for (k, v) in members {
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
        if let Some(value) = decode_value(v, annotated).map_err(|e| err(key, e))? {
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

fn json_string(v: &str) -> Result<String, String> {
    json_str(v)
        .map(Cow::into_owned)
        .map_err(|e| format!("expected a string: {e}"))
}

/// The string a raw JSON value holds, borrowed when it has no escapes. The raw value has
/// been checked as JSON already (by serde_json or the page scanner, neither of which
/// keeps surrounding whitespace), so a quoted run without a backslash is the string
/// itself, and its escapes are well formed.
fn json_str(raw: &str) -> Result<Cow<'_, str>, serde_json::Error> {
    if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
        let inner = &raw[1..raw.len() - 1];
        match inner.bytes().position(|b| b == b'\\') {
            None => return Ok(Cow::Borrowed(inner)),
            Some(first) => {
                if let Some(s) = unescape(inner, first) {
                    return Ok(Cow::Owned(s));
                }
            }
        }
    }
    serde_json::from_str::<String>(raw).map(Cow::Owned)
}

/// Resolves the escapes of a valid JSON string's contents (the first backslash at
/// `first`); `None` at a `\u` escape, left to serde_json.
fn unescape(inner: &str, first: usize) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let mut rest = inner;
    let mut at = first;
    loop {
        out.push_str(&rest[..at]);
        out.push(match rest.as_bytes().get(at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => return None,
        });
        rest = &rest[at + 2..];
        match rest.bytes().position(|b| b == b'\\') {
            Some(next) => at = next,
            None => {
                out.push_str(rest);
                return Some(out);
            }
        }
    }
}

/// Decodes one raw JSON value; `None` for JSON null (the service does not store nulls).
fn decode_value(raw: &str, annotated: Option<EdmType>) -> Result<Option<EdmValue>, String> {
    if raw == "null" {
        return Ok(None);
    }
    let string = || json_str(raw).map_err(|e| format!("expected a string: {e}"));
    let value = match annotated {
        Some(EdmType::String) => EdmValue::String(string()?.into_owned()),
        Some(EdmType::Int64) => {
            let text = if raw.starts_with('"') {
                string()?
            } else {
                Cow::Borrowed(raw)
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
                Cow::Borrowed(raw)
            };
            EdmValue::Double(parse_double(&text).ok_or_else(|| format!("bad Double {text:?}"))?)
        }
        Some(EdmType::DateTime) => EdmValue::DateTime(string()?.into_owned()),
        Some(EdmType::Guid) => EdmValue::Guid(string()?.into_owned()),
        Some(EdmType::Binary) => EdmValue::Binary(
            BASE64
                .decode(string()?.as_bytes())
                .map_err(|e| format!("bad base64 in Binary: {e}"))?,
        ),
        Some(EdmType::Boolean) => EdmValue::Boolean(match raw {
            "true" => true,
            "false" => false,
            _ => return Err(format!("bad Boolean {raw:?}")),
        }),
        None => match raw.as_bytes().first() {
            Some(b'"') => EdmValue::String(string()?.into_owned()),
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
    let mut members = Vec::new();
    let mut de = serde_json::Deserializer::from_str(json);
    MembersSeed(&mut members)
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| EntityDecodeError {
            property: String::new(),
            reason: format!("not a JSON object: {e}"),
        })?;
    decode_members(&members)
}
