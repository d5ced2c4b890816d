//! OData `$filter` expressions with correctly escaped literals: strings with `'` doubled,
//! typed literals for the other Edm types, and the key-range comparisons backup uses.
//!
//! Percent-encoding of the finished expression happens in the HTTP layer.

use std::fmt;

use super::entity::{EdmValue, format_double};

/// A `$filter` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter(String);

/// OData comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
    /// `lt`
    Lt,
    /// `le`
    Le,
}

impl Cmp {
    fn as_str(self) -> &'static str {
        match self {
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
            Cmp::Lt => "lt",
            Cmp::Le => "le",
        }
    }
}

/// An OData string literal: `'` doubled, wrapped in quotes.
pub fn string_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// An OData literal for any typed value.
pub fn literal(value: &EdmValue) -> String {
    match value {
        EdmValue::String(s) => string_literal(s),
        EdmValue::Boolean(b) => b.to_string(),
        EdmValue::Int32(i) => i.to_string(),
        EdmValue::Int64(i) => format!("{i}L"),
        // Rust's shortest round-trip form always has a decimal point or an exponent, which
        // is what makes OData read it as a double.
        EdmValue::Double(d) => format_double(*d),
        EdmValue::DateTime(s) => format!("datetime{}", string_literal(s)),
        EdmValue::Guid(s) => format!("guid{}", string_literal(s)),
        EdmValue::Binary(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("X'{hex}'")
        }
    }
}

impl Filter {
    /// A raw expression, for callers that build their own.
    pub fn raw(expr: impl Into<String>) -> Self {
        Filter(expr.into())
    }

    /// `property op literal`.
    pub fn compare(property: &str, op: Cmp, value: &EdmValue) -> Self {
        Filter(format!("{property} {} {}", op.as_str(), literal(value)))
    }

    /// `PartitionKey op 'value'`.
    pub fn partition_key(op: Cmp, value: &str) -> Self {
        Filter(format!(
            "PartitionKey {} {}",
            op.as_str(),
            string_literal(value)
        ))
    }

    /// `RowKey op 'value'`.
    pub fn row_key(op: Cmp, value: &str) -> Self {
        Filter(format!("RowKey {} {}", op.as_str(), string_literal(value)))
    }

    /// `(self) and (other)`.
    pub fn and(self, other: Filter) -> Self {
        Filter(format!("({}) and ({})", self.0, other.0))
    }

    /// `(self) or (other)`.
    pub fn or(self, other: Filter) -> Self {
        Filter(format!("({}) or ({})", self.0, other.0))
    }

    /// Joins optional parts with `and`; `None` when there are none.
    pub fn all(parts: impl IntoIterator<Item = Filter>) -> Option<Filter> {
        parts.into_iter().reduce(Filter::and)
    }

    /// The expression text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_escaped() {
        assert_eq!(string_literal("o'neil"), "'o''neil'");
        assert_eq!(string_literal("''"), "''''''");
        assert_eq!(string_literal("100% sure"), "'100% sure'");
        assert_eq!(literal(&EdmValue::Int64(-5)), "-5L");
        assert_eq!(literal(&EdmValue::Double(1.0)), "1.0");
        assert_eq!(literal(&EdmValue::Binary(vec![0x0a, 0xff])), "X'0aff'");
        assert_eq!(
            literal(&EdmValue::DateTime("2024-01-02T03:04:05.1234567Z".into())),
            "datetime'2024-01-02T03:04:05.1234567Z'"
        );
        assert_eq!(
            literal(&EdmValue::Guid(
                "c9da6455-213d-42c9-9a79-3e9149a57833".into()
            )),
            "guid'c9da6455-213d-42c9-9a79-3e9149a57833'"
        );
    }

    #[test]
    fn builds_key_ranges() {
        let f = Filter::partition_key(Cmp::Ge, "a'b").and(Filter::partition_key(Cmp::Lt, "m"));
        assert_eq!(
            f.as_str(),
            "(PartitionKey ge 'a''b') and (PartitionKey lt 'm')"
        );
        assert_eq!(Filter::all([]), None);
    }
}
