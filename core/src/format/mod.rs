//! The backup format (version 1), specified in `docs/FORMAT.md`: blocks of XML batches,
//! each block self-contained and optionally compressed on its own, packed from a stream
//! of entities with memory bounded by one block.

pub(crate) mod block;
mod compress;
mod escape;
mod packer;
#[cfg(test)]
mod properties;

pub use block::{DecodedBlock, decode_block};
pub use compress::Compression;
pub use escape::is_xml_char;
pub use packer::{
    DEFAULT_BATCH_BYTES, DEFAULT_BLOCK_BYTES, MARK_ENTITIES, Packer, PackerConfig, SealedBlock, hex,
};

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Largest decompressed block a reader accepts. Writers seal blocks near 4 MiB; one batch
/// of large entities can overflow that, never by this much.
pub const MAX_BLOCK_BYTES: usize = 64 << 20;

/// A block that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The bytes are not a valid block; the message says what is wrong.
    #[error("corrupt block: {0}")]
    Corrupt(String),
    /// The block was written by a newer (or unknown) format version.
    #[error("block has format version {0}; this tablevault reads version 1")]
    UnsupportedVersion(String),
}
