//! What the backup store needs from blob storage. [`BlobStorage`] is the seam: the Azure
//! Blob client implements it, and `testing::MemoryBlobs` does for unit tests that script
//! failures the emulator never produces (an answer lost after the write landed, a 409 on a
//! retried create).

use async_trait::async_trait;
use bytes::Bytes;
use tablevault_azure::Result;
use tablevault_azure::blob::{BlobClient, BlobProperties, ListOptions, ListPage, PutOptions};

/// Block-blob operations on one container.
#[async_trait]
pub trait BlobStorage: Send + Sync {
    /// The container's name.
    fn container(&self) -> &str;

    /// Where these blobs live (a container's URL), for remembering the records this
    /// process created so that listing them back needs no read ([`super::Store`]);
    /// `None` never remembers.
    fn scope(&self) -> Option<String> {
        None
    }

    /// Creates the container; `false` if it already existed.
    async fn create_container(&self) -> Result<bool>;

    /// Uploads an uncommitted block (the id is fixed-width text).
    async fn put_block(&self, blob: &str, block_id: &str, data: Bytes) -> Result<()>;

    /// Commits blocks as the blob's content; returns the ETag.
    async fn put_block_list(
        &self,
        blob: &str,
        block_ids: &[String],
        options: &PutOptions,
    ) -> Result<String>;

    /// Writes a whole blob; returns the ETag. `options.if_none_match` makes it create-only
    /// (`409 BlobAlreadyExists` if it exists).
    async fn put_blob(&self, blob: &str, data: Bytes, options: &PutOptions) -> Result<String>;

    /// Reads a whole blob; `None` if it does not exist.
    async fn get(&self, blob: &str) -> Result<Option<Bytes>>;

    /// Reads `length` bytes at `offset`; a short answer is an error.
    async fn get_range(&self, blob: &str, offset: u64, length: u64) -> Result<Bytes>;

    /// A blob's size, ETag and metadata; `None` if it does not exist.
    async fn properties(&self, blob: &str) -> Result<Option<BlobProperties>>;

    /// Deletes a blob; `false` if it did not exist.
    async fn delete(&self, blob: &str) -> Result<bool>;

    /// Deletes a blob only if its ETag is still `etag`; `false` if it did not exist or
    /// had changed.
    async fn delete_if_match(&self, blob: &str, etag: &str) -> Result<bool>;

    /// Every blob, with its metadata (and, with a delimiter, every virtual directory),
    /// under `prefix`.
    async fn list(&self, prefix: &str, delimiter: Option<&str>) -> Result<ListPage>;
}

#[async_trait]
impl BlobStorage for BlobClient {
    fn container(&self) -> &str {
        BlobClient::container(self)
    }

    fn scope(&self) -> Option<String> {
        Some(self.container_url())
    }

    async fn create_container(&self) -> Result<bool> {
        BlobClient::create_container(self).await
    }

    async fn put_block(&self, blob: &str, block_id: &str, data: Bytes) -> Result<()> {
        BlobClient::put_block(self, blob, block_id, data).await
    }

    async fn put_block_list(
        &self,
        blob: &str,
        block_ids: &[String],
        options: &PutOptions,
    ) -> Result<String> {
        BlobClient::put_block_list(self, blob, block_ids, options).await
    }

    async fn put_blob(&self, blob: &str, data: Bytes, options: &PutOptions) -> Result<String> {
        BlobClient::put_blob(self, blob, data, options).await
    }

    async fn get(&self, blob: &str) -> Result<Option<Bytes>> {
        self.get_if_exists(blob).await
    }

    async fn get_range(&self, blob: &str, offset: u64, length: u64) -> Result<Bytes> {
        BlobClient::get_range(self, blob, offset, length).await
    }

    async fn properties(&self, blob: &str) -> Result<Option<BlobProperties>> {
        BlobClient::properties(self, blob).await
    }

    async fn delete(&self, blob: &str) -> Result<bool> {
        BlobClient::delete(self, blob).await
    }

    async fn delete_if_match(&self, blob: &str, etag: &str) -> Result<bool> {
        BlobClient::delete_if_match(self, blob, etag).await
    }

    async fn list(&self, prefix: &str, delimiter: Option<&str>) -> Result<ListPage> {
        self.list_all(&ListOptions {
            prefix: (!prefix.is_empty()).then_some(prefix),
            delimiter,
            include_metadata: true,
            ..Default::default()
        })
        .await
    }
}
