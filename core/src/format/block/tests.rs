//! Round trips and hostile input for the block writer and decoder.

use super::*;
use crate::format::FormatError;

fn encode(table: &str, batches: &[Vec<Entity>]) -> String {
    let mut body = String::new();
    for b in batches {
        write_batch(&mut body, b);
    }
    let mut out = String::new();
    write_header(&mut out, table);
    out.push_str(&body);
    write_footer(&mut out, batches.iter().map(Vec::len).sum(), batches.len());
    out
}

pub(crate) fn tricky_entity(pk: &str, rk: &str) -> Entity {
    let mut e = Entity::new(pk, rk)
        .with("Plain", EdmValue::String("hello".into()))
        .with(
            "Markup",
            EdmValue::String("<a href=\"x\">&amp;</a> ]]> '".into()),
        )
        .with("Cr", EdmValue::String("a\rb\r\nc\nd\te".into()))
        .with(
            "Controls",
            EdmValue::String("nul\u{0} bell\u{7} \u{FFFE}\u{FFFF} esc\u{1b}".into()),
        )
        .with("Empty", EdmValue::String(String::new()))
        .with("Spaces", EdmValue::String("  lead and trail  ".into()))
        .with("Astral", EdmValue::String("😀 𝔘".into()))
        .with("I64", EdmValue::Int64(i64::MIN))
        .with("I64Max", EdmValue::Int64(i64::MAX))
        .with("I32", EdmValue::Int32(i32::MIN))
        .with("NegZero", EdmValue::Double(-0.0))
        .with("Sub", EdmValue::Double(5e-324))
        .with("NaN", EdmValue::Double(f64::NAN))
        .with("Inf", EdmValue::Double(f64::INFINITY))
        .with("NInf", EdmValue::Double(f64::NEG_INFINITY))
        .with("Whole", EdmValue::Double(42.0))
        .with(
            "DT",
            EdmValue::DateTime("2024-01-02T03:04:05.1234567Z".into()),
        )
        .with(
            "G",
            EdmValue::Guid("c9da6455-213d-42c9-9a79-3e9149a57833".into()),
        )
        .with("Bin", EdmValue::Binary(vec![0, 1, 254, 255]))
        .with("BinEmpty", EdmValue::Binary(vec![]))
        .with("T", EdmValue::Boolean(true))
        .with("odd name\t\"<&>", EdmValue::Boolean(false))
        .with("ctl\u{1}name", EdmValue::Int32(1));
    e.timestamp = Some("2026-11-22T11:27:48.7518390Z".into());
    e.etag = Some("W/\"datetime'2026-11-22T11%3A27%3A48.7518390Z'\"".into());
    e
}

#[test]
fn every_value_round_trips_exactly() {
    let batches = vec![
        vec![
            tricky_entity("p\r\n'\"", "r1"),
            tricky_entity("p\r\n'\"", "r2\u{0}"),
        ],
        vec![Entity::new("", ""), Entity::new("", "x")],
    ];
    let xml = encode("T&b\"l", &batches);
    let decoded = decode_block(xml.as_bytes()).unwrap();
    assert_eq!(decoded.table, "T&b\"l");
    assert_eq!(decoded.batches, batches);
    assert!(!xml.contains('\r'), "raw CR would be normalised by parsers");
    // The writer's layout is read by the fast reader, to the same result.
    assert_eq!(decode_canonical(&xml).as_ref(), Some(&decoded));
    assert_eq!(decode_xml(&xml).unwrap(), decoded);
}

#[test]
fn writer_output_is_byte_for_byte_what_it_was() {
    let mut e = Entity::new("p&<>\r", "r")
        .with("S", EdmValue::String("a\r\nb<c>&d\t\"e'".into()))
        .with("Ctl", EdmValue::String("x\u{1}".into()))
        .with("ctl\u{2}", EdmValue::Int64(-5))
        .with("D", EdmValue::Double(0.1))
        .with("N", EdmValue::Double(f64::NAN))
        .with("B", EdmValue::Binary(vec![1, 2, 3]))
        .with("I", EdmValue::Int32(-2147483648))
        .with("T", EdmValue::Boolean(true))
        .with("n\"\t", EdmValue::Guid("g".into()));
    e.etag = Some("W/\"x\"\n".into());
    e.timestamp = Some("2026-11-22T11:27:48.7518390Z".into());
    let mut out = String::new();
    write_batch(&mut out, &[e]);
    assert_eq!(
        out,
        "<Batch>\n<entry m:etag=\"W/&quot;x&quot;&#10;\"><PartitionKey>p&amp;&lt;&gt;&#13;</PartitionKey>\
<RowKey>r</RowKey><Timestamp>2026-11-22T11:27:48.7518390Z</Timestamp>\
<P n=\"S\" m:type=\"Edm.String\">a&#13;\nb&lt;c&gt;&amp;d\t\"e'</P>\
<P n=\"Ctl\" m:type=\"Edm.String\" enc=\"base64\">eAE=</P>\
<P n64=\"Y3RsAg==\" m:type=\"Edm.Int64\">-5</P>\
<P n=\"D\" m:type=\"Edm.Double\">0.1</P>\
<P n=\"N\" m:type=\"Edm.Double\">NaN</P>\
<P n=\"B\" m:type=\"Edm.Binary\">AQID</P>\
<P n=\"I\" m:type=\"Edm.Int32\">-2147483648</P>\
<P n=\"T\" m:type=\"Edm.Boolean\">true</P>\
<P n=\"n&quot;&#9;\" m:type=\"Edm.Guid\">g</P></entry>\n</Batch>\n"
    );
}

#[test]
fn blocks_in_the_writers_layout_that_break_a_rule_are_rejected_with_a_reason() {
    let e = |pk: &str, rk: &str| Entity::new(pk, rk).with("x", EdmValue::Int32(1));
    let reject = |batches: &[Vec<Entity>], why: &str| {
        let xml = encode("T", batches);
        assert_eq!(decode_canonical(&xml), None, "{why}");
        assert_corrupt(&xml, why);
    };
    reject(&[vec![e("p", "r"), e("q", "s")]], "mixes PartitionKeys");
    reject(&[vec![e("p", "r"), e("p", "r")]], "twice");
    reject(&[vec![e("p", "b"), e("p", "a"), e("p", "b")]], "twice");
    reject(&[vec![]], "empty batch");
    let many: Vec<Entity> = (0..101).map(|i| e("p", &format!("{i:03}"))).collect();
    reject(&[many], "more than 100");
    reject(&[vec![e("p", "r").with("x", EdmValue::Int32(2))]], "twice");
    reject(
        &[vec![e("p", "r").with("PartitionKey", EdmValue::Int32(2))]],
        "invalid property name",
    );
    reject(
        &[vec![e("p", "r").with("", EdmValue::Int32(2))]],
        "invalid property name",
    );
    let wide = (0..255).fold(e("p", "r"), |e, i| {
        e.with(format!("p{i}"), EdmValue::Boolean(true))
    });
    reject(&[vec![wide]], "more than 255");

    // Damage that keeps the layout: counts, values, types, references, truncation.
    let xml = encode("T", &[vec![e("p", "r"), e("p", "s")]]);
    for (from, to, why) in [
        ("entities=\"2\"", "entities=\"3\"", "declares 3 entities"),
        ("batches=\"1\"", "batches=\"0\"", "in 0"),
        (">1</P>", ">1x</P>", "bad Int32"),
        ("Edm.Int32", "Edm.Int33", "unknown type"),
        ("<RowKey>r<", "<RowKey>&bogus;<", ""),
        ("version=\"1\"", "version=\"01\"", ""),
    ] {
        let bad = xml.replacen(from, to, 1);
        assert_ne!(bad, xml);
        assert_eq!(decode_canonical(&bad), None, "{to}");
        assert!(decode_block(bad.as_bytes()).is_err(), "{to}");
        if !why.is_empty() {
            assert_corrupt(&bad, why);
        }
    }
    for cut in [xml.len() - 2, xml.len() - 9, xml.len() / 2] {
        assert_eq!(decode_canonical(&xml[..cut]), None);
        assert!(decode_block(&xml.as_bytes()[..cut]).is_err());
    }
    // Other layouts the format allows are still read, by the general reader.
    let loose = xml.replace(">\n<", ">\n  <").replace("&quot;", "&#34;");
    assert_eq!(decode_canonical(&loose), None);
    assert_eq!(
        decode_block(loose.as_bytes()).unwrap(),
        decode_xml(&xml).unwrap()
    );
}

fn assert_corrupt(xml: &str, why: &str) {
    match decode_block(xml.as_bytes()) {
        Err(FormatError::Corrupt(m)) => {
            assert!(m.contains(why), "{m:?} should mention {why:?}")
        }
        other => panic!("expected corruption ({why}), got {other:?}"),
    }
}

#[test]
fn hostile_blocks_are_rejected_with_a_reason() {
    let head = r#"<Block version="1" table="T">"#;
    let end = |n: usize, b: usize| format!(r#"<End entities="{n}" batches="{b}"/></Block>"#);
    let e = |pk: &str, rk: &str| {
        format!("<entry><PartitionKey>{pk}</PartitionKey><RowKey>{rk}</RowKey></entry>")
    };
    assert_corrupt("", "no Block");
    assert_corrupt("not xml at all <", "");
    assert_corrupt(&format!("{head}<Batch>{}", e("p", "r")), "not closed");
    assert_corrupt(
        &format!(
            "{head}<Batch>{}{}</Batch>{}",
            e("p", "r"),
            e("q", "r"),
            end(2, 1)
        ),
        "mixes PartitionKeys",
    );
    assert_corrupt(
        &format!(
            "{head}<Batch>{}{}</Batch>{}",
            e("p", "r"),
            e("p", "r"),
            end(2, 1)
        ),
        "twice",
    );
    assert_corrupt(
        &format!("{head}<Batch></Batch>{}", end(0, 1)),
        "empty batch",
    );
    assert_corrupt(
        &format!("{head}<Batch>{}</Batch></Block>", e("p", "r")),
        "no End",
    );
    assert_corrupt(
        &format!("{head}<Batch>{}</Batch>{}", e("p", "r"), end(5, 1)),
        "declares 5 entities",
    );
    assert_corrupt(
        &format!(
            "{head}<End entities=\"0\" batches=\"0\"/><Batch>{}</Batch></Block>",
            e("p", "r")
        ),
        "unexpected element",
    );
    let many: String = (0..101).map(|i| e("p", &i.to_string())).collect();
    assert_corrupt(
        &format!("{head}<Batch>{many}</Batch></Block>"),
        "more than 100",
    );
    assert_corrupt(
        &format!("{head}<Batch><entry><RowKey>r</RowKey></entry></Batch></Block>"),
        "no PartitionKey",
    );
    assert_corrupt(
        &format!(
            r#"{head}<Batch><entry><PartitionKey>p</PartitionKey><RowKey>r</RowKey><P n="x" m:type="Edm.Int32">12a</P></entry></Batch></Block>"#
        ),
        "bad Int32",
    );
    assert_corrupt(
        &format!(
            r#"{head}<Batch><entry><PartitionKey>p</PartitionKey><RowKey>r</RowKey><P n="x" m:type="Edm.Decimal">1</P></entry></Batch></Block>"#
        ),
        "unknown type",
    );
    assert_corrupt(
        &format!(
            r#"{head}<Batch><entry><PartitionKey>p</PartitionKey><RowKey>r</RowKey><P n="x" m:type="Edm.Int32">1</P><P n="x" m:type="Edm.Int32">1</P></entry></Batch></Block>"#
        ),
        "twice",
    );
    assert_corrupt(&format!("{head}<Evil/></Block>"), "unexpected element");
    assert_corrupt(
        &format!("{head}<Batch>{}</Batch>{}<Block/>", e("p", "r"), end(1, 1)),
        "unexpected element",
    );
    assert!(matches!(
        decode_block(br#"<Block version="2" table="T"></Block>"#),
        Err(FormatError::UnsupportedVersion(v)) if v == "2"
    ));
    assert_corrupt(
        "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><Block version=\"1\" table=\"T\"><Batch><entry><PartitionKey>&a;</PartitionKey><RowKey>r</RowKey></entry></Batch></Block>",
        "",
    );
}
