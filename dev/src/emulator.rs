//! Runs the Azurite storage emulator for tests, the demo and benchmarks: installs the
//! version pinned in `tests/azurite/package-lock.json` if it is missing (under a file lock,
//! so parallel test binaries install once), starts it in memory on free ports, and stops
//! it when dropped. Every instance is a separate process with its own empty state.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use tablevault_azure::StorageAccount;
use tablevault_azure::config::{EMULATOR_ACCOUNT, EMULATOR_KEY};

use crate::tls::TestCertificate;

/// Why the emulator could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// `npm` is not installed.
    #[error("npm is needed to install Azurite but could not be run: {0}")]
    NpmMissing(std::io::Error),
    /// `npm ci` failed.
    #[error("installing Azurite with `npm ci` in {dir} failed:\n{output}")]
    InstallFailed {
        /// Where npm ran.
        dir: String,
        /// The tail of npm's output.
        output: String,
    },
    /// The emulator process could not start or exited early.
    #[error("Azurite did not start: {0}")]
    StartFailed(String),
    /// Filesystem trouble (lock file, paths).
    #[error("emulator setup: {0}")]
    Io(#[from] std::io::Error),
}

/// The directory holding Azurite's pinned `package.json` and `package-lock.json`.
///
/// `TABLEVAULT_AZURITE_DIR` overrides it; the default is `tests/azurite` in this source tree.
pub fn azurite_dir() -> PathBuf {
    std::env::var_os("TABLEVAULT_AZURITE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/azurite"))
}

fn bin(dir: &Path, name: &str) -> PathBuf {
    dir.join("node_modules").join(".bin").join(name)
}

/// Installs the pinned Azurite with `npm ci` unless it is already there. Safe to call from
/// many processes at once.
pub fn ensure_installed() -> Result<PathBuf, EmulatorError> {
    let dir = azurite_dir();
    if bin(&dir, "azurite").exists() {
        return Ok(dir);
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".install.lock"))?;
    lock.lock()?;
    if !bin(&dir, "azurite").exists() {
        eprintln!("installing Azurite (pinned in {}) ...", dir.display());
        let out = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .map_err(EmulatorError::NpmMissing)?;
        if !out.status.success() || !bin(&dir, "azurite").exists() {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let tail: String = text
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            return Err(EmulatorError::InstallFailed {
                dir: dir.display().to_string(),
                output: tail,
            });
        }
    }
    lock.unlock()?;
    Ok(dir)
}

/// A running emulator. Dropping it kills the process(es).
pub struct Azurite {
    children: Vec<Child>,
    blob_port: u16,
    queue_port: u16,
    table_port: u16,
    /// Started with one process per service (blob, queue, table, in that order).
    split: bool,
    /// `https` when started with a certificate ([`Azurite::start_oauth`]), else `http`.
    scheme: &'static str,
}

impl Azurite {
    /// Starts Blob, Queue and Table in one process, in memory, on free ports.
    pub async fn start() -> Result<Self, EmulatorError> {
        Self::start_with(&[], "http").await
    }

    /// As [`Azurite::start`], but over HTTPS with the process's throwaway certificate
    /// ([`TestCertificate::shared`]) and accepting Microsoft Entra ID bearer tokens
    /// (`--oauth basic`). Azurite checks a token's issuer, audience and lifetime but not
    /// its signature, so tests can mint their own. Shared Key still works.
    pub async fn start_oauth() -> Result<Self, EmulatorError> {
        let cert = TestCertificate::shared();
        let (c, k) = (
            cert.cert_path.to_string_lossy().into_owned(),
            cert.key_path.to_string_lossy().into_owned(),
        );
        Self::start_with(&["--oauth", "basic", "--cert", &c, "--key", &k], "https").await
    }

    async fn start_with(extra: &[&str], scheme: &'static str) -> Result<Self, EmulatorError> {
        let dir = ensure_installed()?;
        let mut cmd = Command::new(bin(&dir, "azurite"));
        cmd.args([
            "--silent",
            "--inMemoryPersistence",
            "--disableTelemetry",
            "--blobHost",
            "127.0.0.1",
            "--queueHost",
            "127.0.0.1",
            "--tableHost",
            "127.0.0.1",
            "--blobPort",
            "0",
            "--queuePort",
            "0",
            "--tablePort",
            "0",
        ]);
        cmd.args(extra);
        let (child, ports) = spawn_and_read_ports(cmd, 3).await?;
        let port = |svc: &str| {
            ports
                .iter()
                .find(|(s, _)| s == svc)
                .map(|(_, p)| *p)
                .ok_or_else(|| EmulatorError::StartFailed(format!("no {svc} port reported")))
        };
        Ok(Azurite {
            blob_port: port("Blob")?,
            queue_port: port("Queue")?,
            table_port: port("Table")?,
            children: vec![child],
            split: false,
            scheme,
        })
    }

    /// Starts each service in its own process (so a slow table scan does not stall blob
    /// uploads on the same Node.js thread), as the benchmark uses it.
    pub async fn start_split() -> Result<Self, EmulatorError> {
        let dir = ensure_installed()?;
        let mut children = Vec::new();
        let mut ports = Vec::new();
        for i in 0..3 {
            // The single-service launchers do not report a port chosen by the OS, so pick a
            // free one ourselves.
            let (child, port) = on_free_port(|port| spawn_single(&dir, i, port)).await?;
            children.push(child);
            ports.push(port);
        }
        Ok(Azurite {
            children,
            blob_port: ports[0],
            queue_port: ports[1],
            table_port: ports[2],
            split: true,
            scheme: "http",
        })
    }

    /// Replaces the Table service of a split emulator with a fresh, empty one on the
    /// same port (blobs and queues keep their state). The emulator's insert rate falls as
    /// its in-memory database grows, so benchmarks start each measurement afresh.
    pub async fn restart_table(&mut self) -> Result<(), EmulatorError> {
        if !self.split {
            return Err(EmulatorError::StartFailed(
                "only an emulator started with start_split can restart its Table service".into(),
            ));
        }
        let dir = ensure_installed()?;
        let _ = self.children[2].kill().await;
        self.children[2] = spawn_single(&dir, 2, self.table_port).await?;
        Ok(())
    }

    /// The emulator's account, with this instance's endpoints.
    pub fn account(&self) -> StorageAccount {
        StorageAccount::from_connection_string(&self.connection_string())
            .expect("emulator connection string is valid")
    }

    /// A connection string for this instance (the emulator key is public).
    pub fn connection_string(&self) -> String {
        self.connection_string_at(self.ports())
    }

    /// A connection string for this instance reached through other local ports (blob,
    /// queue, table), such as a [`crate::delay::DelayLine`]'s in front of [`Azurite::ports`].
    pub fn connection_string_at(&self, [blob, queue, table]: [u16; 3]) -> String {
        format!(
            "DefaultEndpointsProtocol={};AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};{}",
            self.scheme,
            self.endpoints_at([blob, queue, table])
        )
    }

    /// The ports of the Blob, Queue and Table services, in that order.
    pub fn ports(&self) -> [u16; 3] {
        [self.blob_port, self.queue_port, self.table_port]
    }

    /// The three endpoints as connection-string pairs, with no credential: what
    /// `--auth-mode login` takes for an emulator started with [`Azurite::start_oauth`].
    pub fn endpoints(&self) -> String {
        self.endpoints_at(self.ports())
    }

    fn endpoints_at(&self, [blob, queue, table]: [u16; 3]) -> String {
        let s = self.scheme;
        format!(
            "BlobEndpoint={s}://127.0.0.1:{blob}/{EMULATOR_ACCOUNT};\
             QueueEndpoint={s}://127.0.0.1:{queue}/{EMULATOR_ACCOUNT};\
             TableEndpoint={s}://127.0.0.1:{table}/{EMULATOR_ACCOUNT};"
        )
    }

    /// Process ids, for measuring the emulator's own resource use.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    /// CPU seconds (user and system) each process has used so far: blob, queue and table
    /// when started with [`Azurite::start_split`], else the one process. `None` where
    /// `/proc` cannot tell (not Linux). The emulator answers from one Node.js thread per
    /// process, so the table process's CPU is the work a scan or backup cost it.
    pub fn cpu_seconds(&self) -> Option<Vec<f64>> {
        self.pids().into_iter().map(process_cpu_seconds).collect()
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.start_kill();
        }
    }
}

/// CPU seconds a process has used, from `/proc/<pid>/stat` (utime + stime, in clock
/// ticks of 1/100 s on Linux).
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// Starts one service (0 blob, 1 queue, 2 table) on a given port.
async fn spawn_single(dir: &Path, service: usize, port: u16) -> Result<Child, EmulatorError> {
    let (exe, port_flag, host_flag) = [
        ("azurite-blob", "--blobPort", "--blobHost"),
        ("azurite-queue", "--queuePort", "--queueHost"),
        ("azurite-table", "--tablePort", "--tableHost"),
    ][service];
    let mut cmd = Command::new(bin(dir, exe));
    cmd.args([
        "--silent",
        "--inMemoryPersistence",
        "--disableTelemetry",
        port_flag,
        &port.to_string(),
        host_flag,
        "127.0.0.1",
    ]);
    Ok(spawn_and_read_ports(cmd, 1).await?.0)
}

/// Starts of a single service tried when its port was taken, each on a newly chosen
/// free port.
const START_ATTEMPTS: usize = 3;

/// Runs `start` on a free port, and again on another when the port was taken between
/// choosing it and the emulator binding it (Node exits with `listen EADDRINUSE`), up
/// to [`START_ATTEMPTS`] times. Returns what `start` gave and the port.
async fn on_free_port<T, F, Fut>(mut start: F) -> Result<(T, u16), EmulatorError>
where
    F: FnMut(u16) -> Fut,
    Fut: std::future::Future<Output = Result<T, EmulatorError>>,
{
    let mut attempt = 1;
    loop {
        let port = free_port()?;
        match start(port).await {
            Ok(started) => return Ok((started, port)),
            Err(EmulatorError::StartFailed(why))
                if why.contains("EADDRINUSE") && attempt < START_ATTEMPTS =>
            {
                attempt += 1
            }
            Err(e) => return Err(e),
        }
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Spawns the emulator and waits for `expect` "listening"/"started" lines; returns the
/// ports it reported (`("Blob", 12345)`), which single-service launchers do not give.
async fn spawn_and_read_ports(
    mut cmd: Command,
    expect: usize,
) -> Result<(Child, Vec<(String, u16)>), EmulatorError> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    // An emulator a test keeps in a static is never dropped: without this it outlived
    // `cargo test`, one per run. Linux kills it when the thread that started it ends
    // (callers that share one start it on a thread that lives as long as the process).
    #[cfg(target_os = "linux")]
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // prctl, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        EmulatorError::StartFailed(format!("cannot run {:?}: {e}", cmd.as_std().get_program()))
    })?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut ports = Vec::new();
    let mut seen = 0;
    let mut transcript = String::new();
    let wait = async {
        while let Some(line) = lines.next_line().await? {
            transcript.push_str(&line);
            transcript.push('\n');
            if line.contains(" successfully ") {
                seen += 1;
                let svc = ["Blob", "Queue", "Table"]
                    .into_iter()
                    .find(|s| line.contains(&format!("Azurite {s} service")));
                let port = line
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.trim().parse::<u16>().ok());
                if let (Some(svc), Some(port)) = (svc, port) {
                    ports.push((svc.to_string(), port));
                }
                if seen == expect {
                    return Ok::<bool, std::io::Error>(true);
                }
            }
        }
        Ok(false)
    };
    let started = tokio::time::timeout(Duration::from_secs(60), wait).await;
    match started {
        Ok(Ok(true)) => {}
        other => {
            let _ = child.start_kill();
            let mut err = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut BufReader::new(stderr), &mut err)
                .await;
            let why = match other {
                Err(_) => "timed out after 60 s".to_string(),
                Ok(Err(e)) => e.to_string(),
                _ => "exited early".to_string(),
            };
            return Err(EmulatorError::StartFailed(format!(
                "{why}\n{transcript}{err}"
            )));
        }
    }
    // Keep draining both pipes so the emulator never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    tokio::spawn(async move {
        let mut l = BufReader::new(stderr).lines();
        while let Ok(Some(_)) = l.next_line().await {}
    });
    Ok((child, ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(port: u16) -> EmulatorError {
        EmulatorError::StartFailed(format!(
            "exited early\nExiting due to an unhandled error: listen EADDRINUSE: address \
             already in use 127.0.0.1:{port}"
        ))
    }

    #[tokio::test]
    async fn a_port_taken_before_the_emulator_binds_it_is_replaced() {
        let mut tried = Vec::new();
        let (started, port) = on_free_port(|port| {
            tried.push(port);
            let first = tried.len() == 1;
            async move { if first { Err(taken(port)) } else { Ok("up") } }
        })
        .await
        .unwrap();
        assert_eq!((started, tried.len()), ("up", 2));
        assert_eq!(port, tried[1]);
    }

    #[tokio::test]
    async fn other_failures_and_a_port_taken_every_time_are_reported() {
        let mut calls = 0;
        let err = on_free_port(|_| {
            calls += 1;
            async { Err::<(), _>(EmulatorError::StartFailed("timed out after 60 s".into())) }
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
        assert_eq!(calls, 1, "only a taken port is tried again");
        let mut calls = 0;
        let err = on_free_port(|port| {
            calls += 1;
            async move { Err::<(), _>(taken(port)) }
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("EADDRINUSE"), "{err}");
        assert_eq!(calls, START_ATTEMPTS);
    }
}
