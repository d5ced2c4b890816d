//! The accounts a worker holds credentials for, and finding the one a job names.
//!
//! Jobs name accounts by name and endpoint only (never secrets); a worker must have been
//! given the credentials itself, on its command line or in its environment.

use tablevault_azure::{Service, StorageAccount};
use tablevault_core::protocol::AccountRef;

/// A set of accounts with credentials.
#[derive(Debug, Clone, Default)]
pub struct AccountSet {
    accounts: Vec<StorageAccount>,
}

fn normalize(url: &str) -> String {
    url.trim_end_matches('/').to_ascii_lowercase()
}

impl AccountSet {
    /// A set from accounts.
    pub fn new(accounts: Vec<StorageAccount>) -> Self {
        AccountSet { accounts }
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    /// The account a job refers to: same Table endpoint, or failing that the same
    /// account under its Private Link name (`NAME.privatelink.table.core.windows.net`
    /// for `NAME.table.core.windows.net`). A name alone is not enough: a Storage account
    /// and a Cosmos DB Table account, two clouds, two emulators can share one, and a
    /// worker matched by name read and wrote another account's table of the same name.
    pub fn find(&self, wanted: &AccountRef) -> Option<&StorageAccount> {
        let endpoint = normalize(&wanted.table_endpoint);
        let table = |a: &StorageAccount| {
            a.endpoint(Service::Table)
                .map(|u| normalize(u.as_str()))
                .ok()
        };
        self.accounts
            .iter()
            .find(|a| table(a).is_some_and(|u| u == endpoint))
            .or_else(|| {
                let service = service_domain(&endpoint, &wanted.account)?;
                self.accounts.iter().find(|a| {
                    a.name() == wanted.account
                        && table(a).and_then(|u| service_domain(&u, a.name())).as_ref()
                            == Some(&service)
                })
            })
    }
}

/// For an Azure Table endpoint of account `name` (`https://NAME.table.SUFFIX`, or its
/// Private Link name `NAME.privatelink.table.SUFFIX`), `table.SUFFIX`: the same for
/// both names of one account (over HTTP or HTTPS), different for a Cosmos DB account
/// (`table.cosmos.azure.com`) or another cloud. `None` for any other endpoint (an
/// emulator's `host:port/NAME`), which only an exact match finds.
fn service_domain(endpoint: &str, name: &str) -> Option<String> {
    let url = url::Url::parse(endpoint).ok()?;
    if !matches!(url.path(), "" | "/") || url.port().is_some() {
        return None;
    }
    let host = url.host_str()?.to_ascii_lowercase();
    let rest = host.strip_prefix(&format!("{}.", name.to_ascii_lowercase()))?;
    let rest = rest.strip_prefix("privatelink.").unwrap_or(rest);
    rest.starts_with("table.").then(|| rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(conn: &str) -> StorageAccount {
        StorageAccount::from_connection_string(conn).unwrap()
    }

    fn wanted(account: &str, table_endpoint: &str) -> AccountRef {
        AccountRef {
            account: account.into(),
            table_endpoint: table_endpoint.into(),
        }
    }

    #[test]
    fn finds_by_endpoint_or_the_same_account_under_its_private_link_name() {
        let set = AccountSet::new(vec![
            account("AccountName=one;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:1/one"),
            account("AccountName=two;AccountKey=a2V5"),
        ]);
        let find = |r: &AccountRef| set.find(r).map(|a| a.name().to_string());
        assert_eq!(
            find(&wanted("x", "http://127.0.0.1:1/one/")).as_deref(),
            Some("one")
        );
        assert_eq!(
            find(&wanted("two", "https://two.table.core.windows.net")).as_deref(),
            Some("two")
        );
        assert_eq!(
            find(&wanted(
                "two",
                "https://TWO.privatelink.table.core.windows.net/"
            ))
            .as_deref(),
            Some("two")
        );
        assert_eq!(
            find(&wanted("two", "http://two.table.core.windows.net")).as_deref(),
            Some("two")
        );
        assert_eq!(
            find(&wanted("three", "https://three.table.core.windows.net")),
            None
        );
    }

    /// Regression: a worker holding another account of the same name (a Cosmos DB
    /// Table account, another cloud, another emulator) backed up and restored into it.
    #[test]
    fn an_account_of_the_same_name_elsewhere_is_not_the_one_wanted() {
        let set = AccountSet::new(vec![
            account(
                "AccountName=devstoreaccount1;AccountKey=a2V5;\
                 TableEndpoint=http://127.0.0.1:22012/devstoreaccount1",
            ),
            account("AccountName=two;AccountKey=a2V5"),
        ]);
        for r in [
            wanted(
                "devstoreaccount1",
                "http://127.0.0.1:22002/devstoreaccount1",
            ),
            wanted("two", "https://two.table.cosmos.azure.com"),
            wanted("two", "https://two.table.core.chinacloudapi.cn"),
            wanted("two", "https://private.example/two"),
        ] {
            assert!(set.find(&r).is_none(), "{r:?}");
        }
    }
}
