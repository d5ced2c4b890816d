//! Unit tests of entity decoding, encoding and comparison.

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
        entity_from_json(r#"{"PartitionKey":"p","RowKey":"r","X@odata.type":"Edm.Nope","X":1}"#)
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

mod properties {
    //! The service's JSON over its whole input space: any text is parsed or refused,
    //! never panicked on; any double survives formatting; any entity survives its own
    //! JSON.
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_text_is_parsed_or_refused(text in ".{0,300}") {
            let _ = entity_from_json(&text);
            let _ = parse_double(&text);
        }

        #[test]
        fn near_entities_are_parsed_or_refused(
            pairs in proptest::collection::vec(
                ("(PartitionKey|RowKey|X|X@odata\\.type|odata\\.etag|Timestamp)",
                 "(\"Edm\\.(Int64|Int32|Double|Binary|Guid|DateTime|Boolean|String|Nope)\"|-?[0-9]{1,25}(\\.[0-9]{0,5})?(e-?[0-9]{1,3})?|\"[^\"\\\\]{0,8}\"|true|null|\\[\\]|\\{\\})"),
                0..8),
        ) {
            let body: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let _ = entity_from_json(&format!("{{{}}}", body.join(",")));
        }

        #[test]
        fn any_double_but_nan_payloads_survives_formatting(bits in any::<u64>()) {
            let d = f64::from_bits(bits);
            let back = parse_double(&format_double(d)).unwrap();
            if d.is_nan() {
                prop_assert!(back.is_nan());
            } else {
                prop_assert_eq!(back.to_bits(), bits);
            }
        }

        #[test]
        fn json_strings_are_written_as_serde_json_writes_them(
            s in proptest::collection::vec(
                prop_oneof![
                    3 => any::<char>(),
                    1 => prop_oneof![
                        Just('"'), Just('\\'), Just('\n'), Just('\r'), Just('\t'), Just('\u{8}'),
                        Just('\u{c}'), Just('\u{0}'), Just('\u{1f}'), Just('\u{7f}'),
                        Just('\u{2028}'), Just('\u{2029}'), Just('\u{2027}'), Just('\u{20ac}'),
                    ],
                ],
                0..24,
            ).prop_map(String::from_iter),
        ) {
            let expected = serde_json::to_string(&s)
                .unwrap()
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029");
            let mut out = String::new();
            push_json_str(&mut out, &s);
            prop_assert_eq!(json_str_len(&s), expected.len());
            prop_assert_eq!(out, expected);
        }

        #[test]
        fn any_entity_survives_its_json(
            pk in ".{0,10}",
            rk in ".{0,10}",
            s in ".{0,20}",
            i in any::<i64>(),
            n in any::<i32>(),
            bits in any::<u64>(),
            bin in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let d = f64::from_bits(bits);
            let e = Entity::new(pk, rk)
                .with("S", EdmValue::String(s))
                .with("I", EdmValue::Int64(i))
                .with("N", EdmValue::Int32(n))
                .with("D", EdmValue::Double(if d.is_nan() { f64::NAN } else { d }))
                .with("B", EdmValue::Binary(bin));
            let json = e.to_json();
            prop_assert_eq!(e.json_len(), json.len());
            prop_assert_eq!(entity_from_json(&json).unwrap(), e);
        }
    }
}
