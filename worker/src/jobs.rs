//! The job files a worker needs to run tasks: backup plans, restore plans and commit
//! records, read once through the job's [`Store`] and kept, since many tasks share each.
//! Also the stores themselves, one per container, and the Table clients and limiters per
//! account.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use tablevault_azure::blob::BlobClient;
use tablevault_azure::table::TableClient;
use tablevault_azure::{ClientOptions, ConfigError, StorageAccount};
use tablevault_core::protocol::{
    AccountRef, BackupJob, CommitRecord, PROTOCOL_VERSION, RestoreJob, RestoreStateRecord,
};
use tablevault_core::store::{BackupPaths, Store, StoreError};

use crate::accounts::AccountSet;
use crate::limiter::AdaptiveLimit;
use crate::metrics::WorkerMetrics;

/// Most files of one kind kept; the cache starts over beyond that.
const CACHE_LIMIT: usize = 256;

/// How long a restore's state is trusted before it is read again.
pub(crate) const RESTORE_STATE_TTL: Duration = Duration::from_secs(2);

/// Builds the store of a container (the Azure one, or a fake in tests).
pub type StoreFactory = Arc<dyn Fn(&str) -> Result<Store, ConfigError> + Send + Sync>;

/// The store factory for containers of an Azure account.
pub(crate) fn azure_stores(account: StorageAccount, options: ClientOptions) -> StoreFactory {
    Arc::new(move |container| {
        Ok(Store::azure(BlobClient::with_options(
            &account, container, &options,
        )?))
    })
}

struct Cache<T>(Mutex<HashMap<String, Arc<T>>>);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache(Mutex::new(HashMap::new()))
    }
}

impl<T: DeserializeOwned> Cache<T> {
    /// Reads a JSON file once and keeps it. `None` if the file does not exist.
    async fn get(&self, store: &Store, path: &str) -> Result<Option<Arc<T>>, StoreError> {
        let key = format!("{}/{path}", store.container());
        if let Some(v) = self.0.lock().expect("cache lock").get(&key) {
            return Ok(Some(v.clone()));
        }
        let Some(value) = store.read::<T>(path).await? else {
            return Ok(None);
        };
        let value = Arc::new(value);
        let mut cache = self.0.lock().expect("cache lock");
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, value.clone());
        Ok(Some(value))
    }
}

/// Job files, stores and clients, cached for the worker's lifetime.
pub(crate) struct JobFiles {
    store_for: StoreFactory,
    stores: Mutex<HashMap<String, Store>>,
    backups: Cache<BackupJob>,
    restores: Cache<RestoreJob>,
    commits: Cache<CommitRecord>,
    restore_states: Mutex<HashMap<String, (Instant, Option<RestoreStateRecord>)>>,
    tables: Mutex<HashMap<String, TableClient>>,
    limiters: Mutex<HashMap<String, Arc<AdaptiveLimit>>>,
    options: ClientOptions,
    metrics: Arc<WorkerMetrics>,
}

impl JobFiles {
    pub(crate) fn new(
        store_for: StoreFactory,
        options: ClientOptions,
        metrics: Arc<WorkerMetrics>,
    ) -> Self {
        JobFiles {
            store_for,
            stores: Mutex::new(HashMap::new()),
            backups: Cache::default(),
            restores: Cache::default(),
            commits: Cache::default(),
            restore_states: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashMap::new()),
            limiters: Mutex::new(HashMap::new()),
            options,
            metrics,
        }
    }

    /// The store of a job's container.
    pub(crate) fn store(&self, container: &str) -> Result<Store, ConfigError> {
        let mut stores = self.stores.lock().expect("stores lock");
        if let Some(s) = stores.get(container) {
            return Ok(s.clone());
        }
        let store = (self.store_for)(container)?;
        stores.insert(container.to_string(), store.clone());
        Ok(store)
    }

    /// A backup's plan; `None` if the backup does not exist.
    pub(crate) async fn backup_job(
        &self,
        store: &Store,
        id: &str,
    ) -> Result<Option<Arc<BackupJob>>, StoreError> {
        let job = self.backups.get(store, &BackupPaths::new(id).job()).await?;
        if let Some(j) = &job {
            check_protocol(&format!("backup {id}"), j.protocol)?;
        }
        Ok(job)
    }

    /// A restore's plan; `None` if the restore does not exist.
    pub(crate) async fn restore_job(
        &self,
        store: &Store,
        backup: &str,
        restore: &str,
    ) -> Result<Option<Arc<RestoreJob>>, StoreError> {
        let path = BackupPaths::new(backup).restore_job(restore);
        let job = self.restores.get(store, &path).await?;
        if let Some(j) = &job {
            check_protocol(&format!("restore {restore}"), j.protocol)?;
        }
        Ok(job)
    }

    /// Where a restore stands, read at most once per [`RESTORE_STATE_TTL`]: a cancelled or
    /// interrupted restore stops being worked on within that time.
    pub(crate) async fn restore_state(
        &self,
        store: &Store,
        backup: &str,
        restore: &str,
    ) -> Result<Option<RestoreStateRecord>, StoreError> {
        let key = format!("{}/{backup}/{restore}", store.container());
        if let Some((at, state)) = self.restore_states.lock().expect("states lock").get(&key)
            && at.elapsed() < RESTORE_STATE_TTL
        {
            return Ok(state.clone());
        }
        let state = store.restore_state(backup, restore).await?;
        let mut states = self.restore_states.lock().expect("states lock");
        if states.len() >= CACHE_LIMIT {
            states.clear();
        }
        states.insert(key, (Instant::now(), state.clone()));
        Ok(state)
    }

    /// A commit record; a missing one is a 404 (the backup data is gone).
    pub(crate) async fn commit_record(
        &self,
        store: &Store,
        path: &str,
    ) -> Result<Arc<CommitRecord>, StoreError> {
        match self.commits.get(store, path).await? {
            Some(c) => Ok(c),
            None => store.commit_record(path).await.map(Arc::new),
        }
    }

    /// The limiter of an account (one per account per worker, shared by its backup reads
    /// and restore writes).
    pub(crate) fn limiter_for(&self, endpoint: &str) -> Arc<AdaptiveLimit> {
        self.limiters
            .lock()
            .expect("limiters lock")
            .entry(endpoint.to_string())
            .or_insert_with(|| {
                let limiter = AdaptiveLimit::for_endpoint(endpoint);
                self.metrics.watch_limiter(endpoint, &limiter);
                limiter
            })
            .clone()
    }

    /// A Table client for an account a job names, from the accounts this worker holds
    /// credentials for; with a limiter, its retries report throttling to it.
    pub(crate) fn table_client(
        &self,
        accounts: &AccountSet,
        wanted: &AccountRef,
        limiter: Option<&Arc<AdaptiveLimit>>,
    ) -> Option<TableClient> {
        let account = accounts.find(wanted)?;
        let key = format!("{}|{}", wanted.table_endpoint, limiter.is_some());
        let mut cache = self.tables.lock().expect("tables lock");
        if let Some(c) = cache.get(&key) {
            return Some(c.clone());
        }
        let mut options = self.options.clone();
        if let Some(l) = limiter {
            options.retry.observer = Some(l.clone());
        }
        let client = TableClient::with_options(account, &options).ok()?;
        cache.insert(key, client.clone());
        Some(client)
    }
}

/// Refuses job files written by a newer (or unknown) protocol version.
fn check_protocol(what: &str, protocol: u32) -> Result<(), StoreError> {
    if protocol == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "{what} uses protocol {protocol}; this worker speaks {PROTOCOL_VERSION}"
        )))
    }
}
