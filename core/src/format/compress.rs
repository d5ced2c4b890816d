//! Per-block compression. Each block is compressed on its own so restore can fetch and
//! decode one block with a ranged read. Blocks are compressed as they are written (a
//! compressed block never exists uncompressed in memory); decompression is bounded, so a
//! hostile block cannot make a reader allocate more than a fixed limit.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::FormatError;

/// Most output space reserved before decompressing; more grows as needed. Blocks are
/// sealed near 4 MiB.
const RESERVE_LIMIT: usize = 8 << 20;

/// The deflate level of gzip blocks.
const GZIP_LEVEL: u32 = 5;

/// How block bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The XML as is.
    #[default]
    None,
    /// Zstandard (level 3), one frame per block.
    Zstd,
    /// gzip (RFC 1952), one member per block.
    Gzip,
}

impl Compression {
    /// The name used on the command line, in metadata and in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }

    /// Compresses one whole block exactly as the packer does as it writes one (zstd level 3
    /// with a 128 KiB window, gzip level 5). For tools and benchmarks; the packer streams.
    pub fn compress(self, data: &[u8]) -> Vec<u8> {
        let mut zstd = None;
        let mut encoder = BlockEncoder::new(self, data.len(), &mut zstd);
        encoder.write(data);
        encoder.finish(&mut zstd)
    }

    /// Decompresses one block, refusing to produce more than `limit` bytes.
    pub fn decompress(self, data: &[u8], limit: usize) -> Result<Vec<u8>, FormatError> {
        let bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, FormatError> {
            // Readers pass the recorded size as the limit: room for all of it (and the
            // byte that would pass it) up front saves growing through every power of two.
            let mut out = Vec::with_capacity(limit.saturating_add(1).min(RESERVE_LIMIT));
            reader
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    FormatError::Corrupt(format!("{} data does not decompress: {e}", self.as_str()))
                })?;
            if out.len() > limit {
                return Err(FormatError::Corrupt(format!(
                    "block decompresses to more than {limit} bytes"
                )));
            }
            Ok(out)
        };
        match self {
            Compression::None => {
                if data.len() > limit {
                    return Err(FormatError::Corrupt(format!(
                        "block is larger than {limit} bytes"
                    )));
                }
                Ok(data.to_vec())
            }
            Compression::Zstd => {
                let mut d = zstd::stream::read::Decoder::new(data)
                    .map_err(|e| FormatError::Corrupt(format!("zstd: {e}")))?
                    .single_frame();
                bounded(&mut d)
            }
            Compression::Gzip => {
                let mut d = flate2::read::GzDecoder::new(data);
                bounded(&mut d)
            }
        }
    }
}

/// Where a block's XML goes as batches close: straight into the buffer that will be
/// uploaded, or through a streaming compressor, so a compressed block never exists
/// uncompressed in memory.
pub(crate) enum BlockEncoder {
    Plain(Vec<u8>),
    Zstd(zstd::stream::zio::Writer<Vec<u8>, ZstdContext>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
}

pub(crate) type ZstdContext = zstd::stream::raw::Encoder<'static>;

/// A zstd compression context, made once per packer and reset between blocks: making one
/// per block churns a megabyte of allocations that the allocator tends to keep.
fn zstd_context() -> ZstdContext {
    use zstd::stream::raw::CParameter;
    let mut e = ZstdContext::new(3).expect("zstd context with a valid level");
    // A 128 KiB window keeps the context near 1 MiB; rows of one table repeat themselves
    // within far less than that.
    e.set_parameter(CParameter::WindowLog(17))
        .expect("valid zstd window");
    e
}

impl BlockEncoder {
    pub(crate) fn new(
        compression: Compression,
        block_bytes: usize,
        zstd: &mut Option<ZstdContext>,
    ) -> BlockEncoder {
        match compression {
            // Reserved once: pages become resident only as they are written.
            Compression::None => BlockEncoder::Plain(Vec::with_capacity(block_bytes + (64 << 10))),
            Compression::Zstd => {
                let ctx = zstd.take().unwrap_or_else(zstd_context);
                BlockEncoder::Zstd(zstd::stream::zio::Writer::new(Vec::new(), ctx))
            }
            // Level 5 of the zlib-rs backend: blocks of the sample entities to 9.8% of
            // their XML at 389,000 entities/s per core, where level 7 made 9.7% at
            // 240,000, under the 250,000 a core must keep up with (level 6: 10.0%, 250,000).
            // Any level decompresses the same way.
            Compression::Gzip => BlockEncoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(GZIP_LEVEL),
            )),
        }
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        match self {
            BlockEncoder::Plain(v) => v.extend_from_slice(bytes),
            BlockEncoder::Zstd(e) => e.write_all(bytes).expect("writing to a Vec cannot fail"),
            BlockEncoder::Gzip(e) => e.write_all(bytes).expect("writing to a Vec cannot fail"),
        }
    }

    /// The finished bytes, handing the zstd context back for the next block.
    pub(crate) fn finish(self, zstd: &mut Option<ZstdContext>) -> Vec<u8> {
        use zstd::stream::raw::Operation;
        match self {
            BlockEncoder::Plain(v) => v,
            BlockEncoder::Zstd(mut w) => {
                w.finish().expect("writing to a Vec cannot fail");
                let (out, mut ctx) = w.into_inner();
                if ctx.reinit().is_ok() {
                    *zstd = Some(ctx);
                }
                out
            }
            BlockEncoder::Gzip(e) => e.finish().expect("writing to a Vec cannot fail"),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Compression::None),
            "zstd" => Ok(Compression::Zstd),
            "gzip" => Ok(Compression::Gzip),
            other => Err(format!(
                "unknown compression {other:?} (none, zstd or gzip)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_bounds() {
        let data = "<Block>".repeat(10_000).into_bytes();
        for c in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let mut zstd = None;
            let mut enc = BlockEncoder::new(c, data.len(), &mut zstd);
            enc.write(&data);
            let packed = enc.finish(&mut zstd);
            assert_eq!(c.decompress(&packed, data.len()).unwrap(), data, "{c}");
            assert!(c.decompress(&packed, data.len() - 1).is_err(), "{c} bound");
        }
        assert!(Compression::Zstd.decompress(b"garbage", 100).is_err());
        assert!(Compression::Gzip.decompress(b"garbage", 100).is_err());
        assert_eq!("ZSTD".parse::<Compression>(), Ok(Compression::Zstd));
        assert!("lz4".parse::<Compression>().is_err());
    }
}
