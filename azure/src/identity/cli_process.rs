//! How the Azure CLI is run for a token: in a process group of its own, stopped (with
//! everything it started) when it has not answered within [`AZ_LIMIT`] or when the
//! request waiting for it gives up.
//!
//! `azure_identity` runs `/bin/sh -c "cd /bin && az account get-access-token …"` and,
//! by default, waits for it without a limit; a request that gave up (the token cache's
//! bound, the operation's deadline, Ctrl-C) left `sh` and `az` (a Python process)
//! running, one more each time the token was asked for again. Killing `sh` alone
//! would leave `az` behind, so the whole group goes.

use std::ffi::OsStr;
use std::io;
use std::process::{Output, Stdio};
use std::time::Duration;

use azure_identity::Executor;

/// How long `az account get-access-token` may take. It answers in one to five seconds
/// when signed in (its cold start is Python's); the Azure SDKs give it 10-13 s. This
/// leaves room for a slow machine while still ending a CLI that waits on a prompt or
/// a network that does not answer.
pub(crate) const AZ_LIMIT: Duration = Duration::from_secs(30);

/// Runs each command in a new process group, killed on timeout or when dropped.
#[derive(Debug)]
pub(crate) struct GroupExecutor {
    pub(crate) limit: Duration,
}

#[async_trait::async_trait]
impl Executor for GroupExecutor {
    async fn run(&self, program: &OsStr, args: &[&OsStr]) -> io::Result<Output> {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        let child = command.spawn()?;
        let group = GroupGuard(child.id());
        let output = tokio::time::timeout(self.limit, child.wait_with_output()).await;
        match output {
            Ok(done) => {
                // The leader has exited; anything it left in the group is stopped too.
                drop(group);
                done
            }
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the Azure CLI gave no token within {} s and was stopped (is `az` \
                     waiting on a prompt or on a network that does not answer?)",
                    self.limit.as_secs()
                ),
            )),
        }
    }
}

/// Kills the process group led by the child when dropped: after it exits, on timeout,
/// or when the future running it is dropped.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|id| i32::try_from(id).ok()) {
            // SAFETY: kill(2) with a negative pid signals the group this child leads
            // (created by `process_group(0)` at spawn); it touches no memory. Until the
            // leader is reaped (tokio reaps it after this guard, on drop) its pid, and
            // so the group id, cannot be reused.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    /// Runs `script` under `sh -c`; it writes the pid of a grandchild it starts to
    /// `pidfile`.
    async fn grandchild_of(
        limit: Duration,
        script: &str,
        pidfile: &std::path::Path,
        give_up: Option<Duration>,
    ) -> (Option<io::Result<Output>>, i32) {
        let executor = GroupExecutor { limit };
        let args = [OsStr::new("-c"), OsStr::new(script)];
        let run = executor.run(OsStr::new("/bin/sh"), &args);
        let result = match give_up {
            Some(after) => tokio::time::timeout(after, run).await.ok(),
            None => Some(run.await),
        };
        let pid = std::fs::read_to_string(pidfile)
            .expect("the script wrote its grandchild's pid")
            .trim()
            .parse()
            .expect("a pid");
        (result, pid)
    }

    fn pidfile_named(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("tablevault-az-{name}-{}.pid", std::process::id()))
    }

    async fn gone(pid: i32) -> bool {
        // The kill is delivered at once; reaping by init can take a moment.
        for _ in 0..50 {
            if !alive(pid) || zombie(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    }

    #[tokio::test]
    async fn a_cli_that_does_not_answer_is_stopped_with_what_it_started() {
        let pidfile = pidfile_named("timeout");
        let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        let (result, pid) =
            grandchild_of(Duration::from_millis(300), &script, &pidfile, None).await;
        let err = result.unwrap().expect_err("timed out");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("stopped"), "{err}");
        assert!(gone(pid).await, "the grandchild {pid} still runs");
    }

    #[tokio::test]
    async fn a_request_that_gives_up_stops_the_cli() {
        let pidfile = pidfile_named("given-up");
        let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        let (result, pid) = grandchild_of(
            Duration::from_secs(60),
            &script,
            &pidfile,
            Some(Duration::from_millis(300)),
        )
        .await;
        assert!(result.is_none(), "the run was given up on");
        assert!(gone(pid).await, "the grandchild {pid} still runs");
    }

    #[tokio::test]
    async fn an_answer_is_passed_on() {
        let executor = GroupExecutor {
            limit: Duration::from_secs(10),
        };
        let out = executor
            .run(
                OsStr::new("/bin/sh"),
                &[
                    OsStr::new("-c"),
                    OsStr::new("echo token; echo warn >&2; exit 3"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(out.stdout, b"token\n");
        assert_eq!(out.stderr, b"warn\n");
        assert_eq!(out.status.code(), Some(3));
    }
}
