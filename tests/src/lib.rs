//! Support code for tablevault's integration tests: a fresh, isolated Azurite per test
//! (in memory, on free ports), a scripted mock HTTP server for failures Azurite cannot
//! produce, a fake Entra ID token endpoint, and small data helpers.

pub mod fake_entra;
pub mod fault_proxy;
pub mod mock_server;

use futures::StreamExt;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::{BatchOperation, EdmValue, Entity, Query, TableClient};
use tablevault_dev::emulator::Azurite;

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

/// A number a soak or property test takes from the environment variable `name` (more
/// cases, other seeds), or `default` when it is unset or not a number.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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

/// Every entity of a table, in key order.
pub async fn scan_all(client: &TableClient, table: &str) -> Vec<Entity> {
    client
        .pages(table, Query::scan(None))
        .collect_entities()
        .await
        .unwrap_or_else(|e| panic!("scanning {table}: {e}"))
}

/// Keys that break naive clients: quotes, percent signs, spaces, non-ASCII, characters
/// whose UTF-16 and UTF-8 orders differ, and the empty key.
pub const AWKWARD_KEYS: &[&str] = &[
    "",
    "o'neil",
    "''",
    "100% sure",
    "%25",
    "a b",
    "ünï",
    "日本",
    "😀",
    "\u{E000}",
    "+=&",
    "(paren),comma",
];

/// An entity with every Edm type at its edges. Leaves out `-0.0`, which Azurite turns
/// into `0.0` (docs/ARCHITECTURE.md).
pub fn edge_entity(pk: &str, rk: &str) -> Entity {
    Entity::new(pk, rk)
        .with("S", EdmValue::String("plain".into()))
        .with("Xml", EdmValue::String("<a>&amp;</a> ]]> \"'".into()))
        .with(
            "Crlf",
            EdmValue::String("line1\r\nline2\rline3\nline4\t".into()),
        )
        .with(
            "Ctl",
            EdmValue::String("nul\u{0}bell\u{7}ff\u{c}\u{FFFE}\u{FFFF}".into()),
        )
        .with("Empty", EdmValue::String(String::new()))
        .with("Ws", EdmValue::String("  padded  ".into()))
        .with("Astral", EdmValue::String("😀𝔘".into()))
        .with("Long", EdmValue::String("é".repeat(16_000)))
        .with("T", EdmValue::Boolean(true))
        .with("F", EdmValue::Boolean(false))
        .with("I32Min", EdmValue::Int32(i32::MIN))
        .with("I32Max", EdmValue::Int32(i32::MAX))
        .with("I64Min", EdmValue::Int64(i64::MIN))
        .with("I64Max", EdmValue::Int64(i64::MAX))
        .with("DMax", EdmValue::Double(f64::MAX))
        .with("DMinPos", EdmValue::Double(f64::MIN_POSITIVE))
        .with("DSub", EdmValue::Double(5e-324))
        .with("DSubMax", EdmValue::Double(2.225_073_858_507_201e-308))
        .with("DWhole", EdmValue::Double(3.0))
        .with("DBigWhole", EdmValue::Double(9_007_199_254_740_993.0))
        .with("DBig", EdmValue::Double(1e300))
        .with("DTenth", EdmValue::Double(0.1))
        .with("DNaN", EdmValue::Double(f64::NAN))
        .with("DInf", EdmValue::Double(f64::INFINITY))
        .with("DNInf", EdmValue::Double(f64::NEG_INFINITY))
        .with(
            "Dt7",
            EdmValue::DateTime("2024-01-02T03:04:05.1234567Z".into()),
        )
        .with(
            "DtMax",
            EdmValue::DateTime("9999-12-31T23:59:59.9999999Z".into()),
        )
        .with(
            "DtMin",
            EdmValue::DateTime("1601-01-01T00:00:00.0000000Z".into()),
        )
        .with(
            "G",
            EdmValue::Guid("c9da6455-213d-42c9-9a79-3e9149a57833".into()),
        )
        .with("Bin", EdmValue::Binary((0..=255u8).collect()))
        .with("BinEmpty", EdmValue::Binary(vec![]))
}

/// Creates `table` and writes `batches` into it (each one entity group transaction);
/// returns the entities as the service holds them.
pub async fn load_batches(
    client: &TableClient,
    table: &str,
    batches: impl IntoIterator<Item = Vec<BatchOperation>>,
) -> Vec<Entity> {
    client
        .create_table(table)
        .await
        .unwrap_or_else(|e| panic!("creating {table}: {e}"));
    for ops in batches {
        client
            .submit_batch(table, &ops)
            .await
            .unwrap_or_else(|e| panic!("loading {table}: {e}"));
    }
    scan_all(client, table).await
}

/// Creates `table` with `partitions × per` small entities (`p000`/`r00000`, …) and
/// returns them as the service holds them.
pub async fn load_numbered(
    client: &TableClient,
    table: &str,
    partitions: usize,
    per: usize,
) -> Vec<Entity> {
    let rows: Vec<usize> = (0..per).collect();
    let batches = (0..partitions).flat_map(|p| {
        rows.chunks(100)
            .map(|chunk| {
                chunk
                    .iter()
                    .map(|r| {
                        BatchOperation::Insert(
                            Entity::new(format!("p{p:03}"), format!("r{r:05}"))
                                .with("V", EdmValue::Int64(*r as i64))
                                .with("Pad", EdmValue::String(format!("{p}-{r}-").repeat(20))),
                        )
                    })
                    .collect()
            })
            .collect::<Vec<_>>()
    });
    load_batches(client, table, batches).await
}

/// Loads `count` tables named `<prefix>NNN` of three entities each, table `large` (if
/// any) with 2,700 across three partitions; returns the names and entities by name.
pub async fn load_many_tables(
    client: &TableClient,
    prefix: &str,
    count: usize,
    large: Option<usize>,
) -> std::collections::BTreeMap<String, Vec<Entity>> {
    futures::stream::iter(0..count)
        .map(|i| async move {
            let table = format!("{prefix}{i:03}");
            let entities = if Some(i) == large {
                load_numbered(client, &table, 3, 900).await
            } else {
                load_numbered(client, &table, 1, 3).await
            };
            (table, entities)
        })
        .buffer_unordered(8)
        .collect()
        .await
}

/// Creates `table` holding [`edge_entity`] for every pair of [`AWKWARD_KEYS`] and returns
/// the entities as the service holds them.
pub async fn load_edge_table(client: &TableClient, table: &str) -> Vec<Entity> {
    let batches = AWKWARD_KEYS.iter().map(|pk| {
        AWKWARD_KEYS
            .iter()
            .map(|rk| BatchOperation::Insert(edge_entity(pk, rk)))
            .collect()
    });
    load_batches(client, table, batches).await
}

/// A local address that refuses every connection for as long as the returned socket
/// lives: the socket is bound but never listens, so no test running alongside can take
/// the port, as it can a port bound, freed and hoped to stay closed (the daemon test's
/// "unreachable" worker once reached another test's worker there, got a 404 and exited
/// 1).
pub fn refusing_address() -> (tokio::net::TcpSocket, std::net::SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind(([127, 0, 0, 1], 0).into())
        .expect("a loopback port");
    let addr = socket.local_addr().expect("the bound address");
    (socket, addr)
}

/// GETs `path` from a local HTTP/1.1 server (a worker's metrics endpoint): the status and
/// the body, or `None` when nothing answers.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let status = out.get(9..12)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Some((status, body.to_string()))
}
