//! The names of an identity read from its access token: the `appid`, `oid`, `upn` and
//! `tid` claims of the JWT payload, decoded without checking the signature (they only
//! label messages). The token itself is never kept or shown.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Identity claims of an access token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// Application (client) id of a service principal or managed identity.
    pub appid: Option<String>,
    /// Object id of the principal: what role assignments name.
    pub oid: Option<String>,
    /// User principal name, for a signed-in user.
    pub upn: Option<String>,
    /// Tenant id.
    pub tid: Option<String>,
}

/// Claims are ids and names, but still come from outside: keep them short and printable.
fn clean(v: &serde_json::Value) -> Option<String> {
    let s = v.as_str()?;
    let s: String = s.chars().filter(|c| !c.is_control()).take(100).collect();
    (!s.is_empty()).then_some(s)
}

impl Claims {
    /// The claims of a JWT's payload, or `None` if `token` is not a JWT.
    pub fn decode(token: &str) -> Option<Claims> {
        let mut parts = token.split('.');
        let (_header, payload) = (parts.next()?, parts.next()?);
        let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        Some(Claims {
            appid: clean(&v["appid"]).or_else(|| clean(&v["azp"])),
            oid: clean(&v["oid"]),
            upn: clean(&v["upn"]).or_else(|| clean(&v["unique_name"])),
            tid: clean(&v["tid"]),
        })
    }

    /// Whether no claim was found.
    pub fn is_empty(&self) -> bool {
        *self == Claims::default()
    }
}

impl fmt::Display for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in [
            ("appid", &self.appid),
            ("oid", &self.oid),
            ("upn", &self.upn),
            ("tid", &self.tid),
        ] {
            if let Some(v) = v {
                if !first {
                    f.write_str(", ")?;
                }
                write!(f, "{k} {v}")?;
                first = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_from_a_jwt_payload() {
        let payload = URL_SAFE_NO_PAD.encode(
            br#"{"aud":"https://storage.azure.com","appid":"app-1","oid":"obj-2","tid":"t-3"}"#,
        );
        let c = Claims::decode(&format!("e30.{payload}.sig")).unwrap();
        assert_eq!(c.to_string(), "appid app-1, oid obj-2, tid t-3");
        assert!(Claims::decode("not a jwt").is_none());
        assert!(Claims::decode("a.!!!.c").is_none());
    }
}
