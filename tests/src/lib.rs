//! Support code for tablevault's integration tests: a fresh, isolated Azurite per test
//! (in memory, on free ports), a scripted mock HTTP server for failures Azurite cannot
//! produce, and small data helpers.

pub mod mock_server;

use tablevault_common::StorageAccount;
use tablevault_common::emulator::Azurite;

/// A running emulator owned by one test. Dropping it stops the emulator.
pub struct TestEnv {
    /// The emulator process.
    pub azurite: Azurite,
    /// Its account, pointing at its ports.
    pub account: StorageAccount,
}

impl TestEnv {
    /// Starts a new emulator; panics with the reason if it cannot (tests need it).
    pub async fn start() -> TestEnv {
        let azurite = Azurite::start()
            .await
            .unwrap_or_else(|e| panic!("cannot start Azurite for the test: {e}"));
        let account = azurite.account();
        TestEnv { azurite, account }
    }

    /// The emulator's connection string.
    pub fn connection_string(&self) -> String {
        self.azurite.connection_string()
    }
}

/// A table name no other test uses (letters and digits only).
pub fn unique_table(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &id[..12])
}

/// A queue or container name no other test uses.
pub fn unique_lower(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..12])
}
