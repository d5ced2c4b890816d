//! Choosing tables of a backup and naming their targets: `--tables T1,T2` and
//! `--rename T1=T1restored,…`, shared by `restore` and `verify`.

use tablevault_azure::table::table_name_problem;
use tablevault_core::protocol::Manifest;

use crate::{Error, Result};

/// Parses `--rename` pairs (`from=to`). A table renamed twice is refused: only the
/// first rename was used, and the table the user also named was silently not written.
pub fn parse_renames(pairs: &[String]) -> Result<Vec<(String, String)>> {
    let renames: Vec<(String, String)> = pairs
        .iter()
        .map(|p| {
            let (from, to) = p
                .split_once('=')
                .ok_or_else(|| Error::invalid(format!("--rename {p:?}: expected SOURCE=TARGET")))?;
            let (from, to) = (from.trim(), to.trim());
            if let Some(why) = table_name_problem(to) {
                return Err(Error::invalid(format!("--rename {p:?}: {why}")));
            }
            Ok((from.to_string(), to.to_string()))
        })
        .collect::<Result<_>>()?;
    for (i, (from, to)) in renames.iter().enumerate() {
        if let Some((_, other)) = renames[..i]
            .iter()
            .find(|(f, _)| f.eq_ignore_ascii_case(from))
        {
            return Err(Error::invalid(format!(
                "--rename: {from:?} is renamed twice, to {other:?} and to {to:?}"
            )));
        }
    }
    Ok(renames)
}

/// Names a list by its first [`NAMED`] items and how many more there are: a backup of
/// 613 tables listed them all in one error line of 6,000 characters.
fn some_of<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let total = names.len();
    let mut text = names.take(NAMED).collect::<Vec<_>>().join(", ");
    if total > NAMED {
        text.push_str(&format!(
            " and {} more; `tablevault list --json` names them",
            total - NAMED
        ));
    }
    text
}

/// How many names an error lists.
const NAMED: usize = 10;

/// The (source, target) table pairs to work on: the named tables (all of the backup's
/// when `None`), each renamed if asked. Unknown names, renames of tables not selected, and
/// two sources landing in one target are refused.
pub fn select(
    manifest: &Manifest,
    tables: Option<&[String]>,
    renames: &[(String, String)],
) -> Result<Vec<(String, String)>> {
    let in_backup = |name: &str| {
        manifest
            .tables
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
            .map(|t| t.name.clone())
    };
    let chosen: Vec<String> = match tables {
        None => manifest.tables.iter().map(|t| t.name.clone()).collect(),
        Some(names) => {
            let mut out = Vec::new();
            for n in names {
                let t = in_backup(n).ok_or_else(|| {
                    Error::invalid(format!(
                        "table {n:?} is not in backup {} (it has: {})",
                        manifest.backup_id,
                        some_of(manifest.tables.iter().map(|t| t.name.as_str()))
                    ))
                })?;
                if !out.contains(&t) {
                    out.push(t);
                }
            }
            out
        }
    };
    for (from, _) in renames {
        match in_backup(from) {
            Some(t) if chosen.contains(&t) => {}
            _ => {
                return Err(Error::invalid(format!(
                    "--rename {from}=…: {from:?} is not among the tables being restored"
                )));
            }
        }
    }
    let mut pairs: Vec<(String, String)> = chosen
        .into_iter()
        .map(|source| {
            let target = renames
                .iter()
                .find(|(from, _)| from.eq_ignore_ascii_case(&source))
                .map(|(_, to)| to.clone())
                .unwrap_or_else(|| source.clone());
            (source, target)
        })
        .collect();
    pairs.sort();
    for (i, (_, t)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(_, o)| o.eq_ignore_ascii_case(t)) {
            return Err(Error::invalid(format!(
                "two tables would be restored into {t:?}"
            )));
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::format::Compression;
    use tablevault_core::protocol::{AccountRef, ManifestTable};

    fn manifest(names: &[&str]) -> Manifest {
        Manifest {
            format: 1,
            backup_id: "b".into(),
            created_at: String::new(),
            completed_at: String::new(),
            source: AccountRef {
                account: "a".into(),
                table_endpoint: "x".into(),
            },
            compression: Compression::None,
            tables: names
                .iter()
                .map(|n| ManifestTable {
                    name: n.to_string(),
                    entities: 0,
                    raw_bytes: 0,
                    stored_bytes: 0,
                    blobs: 0,
                    blocks: 0,
                    ranges: vec![],
                })
                .collect(),
            entities: 0,
            raw_bytes: 0,
            stored_bytes: 0,
            tool_version: String::new(),
        }
    }

    #[test]
    fn selects_and_renames() {
        let m = manifest(&["Orders", "Users"]);
        let r = parse_renames(&["orders=OrdersRestored".into()]).unwrap();
        assert_eq!(
            select(&m, None, &r).unwrap(),
            vec![
                ("Orders".into(), "OrdersRestored".into()),
                ("Users".into(), "Users".into())
            ]
        );
        assert_eq!(
            select(&m, Some(&["users".into()]), &[]).unwrap(),
            vec![("Users".into(), "Users".into())]
        );
        assert!(select(&m, Some(&["Nope".into()]), &[]).is_err());
        assert!(
            select(&m, Some(&["Users".into()]), &r).is_err(),
            "rename of an unselected table"
        );
        let clash = parse_renames(&["Orders=Users".into()]).unwrap();
        assert!(select(&m, None, &clash).is_err());
        assert!(parse_renames(&["Orders".into()]).is_err());
        assert!(parse_renames(&["Orders=bad-name".into()]).is_err());
        // One table renamed twice: only the first was used, silently.
        let twice = parse_renames(&["Orders=Orders2".into(), "orders=Orders3".into()]);
        assert!(
            twice.is_err_and(|e| e.to_string().contains("renamed twice")),
            "a table renamed twice is refused"
        );
    }

    /// Regression: an unknown table of a backup of 613 named all 613 in one line.
    #[test]
    fn an_unknown_table_names_a_few_of_the_backups() {
        let names: Vec<String> = (0..613).map(|i| format!("T{i:03}")).collect();
        let m = manifest(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let e = select(&m, Some(&["Nope".into()]), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("T000, T001"), "{e}");
        assert!(e.contains("T009 and 603 more"), "{e}");
        assert!(!e.contains("T010"), "{e}");
        let e = select(&manifest(&["A", "B"]), Some(&["Nope".into()]), &[]);
        assert!(e.unwrap_err().to_string().ends_with("(it has: A, B)"));
    }
}
