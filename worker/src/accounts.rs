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

    /// The account a job refers to: same Table endpoint, or failing that the same name
    /// (the endpoint can legitimately differ, e.g. a private endpoint).
    pub fn find(&self, wanted: &AccountRef) -> Option<&StorageAccount> {
        let endpoint = normalize(&wanted.table_endpoint);
        self.accounts
            .iter()
            .find(|a| {
                a.endpoint(Service::Table)
                    .is_ok_and(|u| normalize(u.as_str()) == endpoint)
            })
            .or_else(|| self.accounts.iter().find(|a| a.name() == wanted.account))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_endpoint_then_name() {
        let a = StorageAccount::from_connection_string(
            "AccountName=one;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:1/one",
        )
        .unwrap();
        let b = StorageAccount::from_connection_string("AccountName=two;AccountKey=a2V5").unwrap();
        let set = AccountSet::new(vec![a, b]);
        let r = AccountRef {
            account: "x".into(),
            table_endpoint: "http://127.0.0.1:1/one/".into(),
        };
        assert_eq!(set.find(&r).unwrap().name(), "one");
        let r = AccountRef {
            account: "two".into(),
            table_endpoint: "https://private.example/two".into(),
        };
        assert_eq!(set.find(&r).unwrap().name(), "two");
        let r = AccountRef {
            account: "three".into(),
            table_endpoint: "https://three.table.core.windows.net".into(),
        };
        assert!(set.find(&r).is_none());
    }
}
