//! The Kubernetes manifests under deploy/kubernetes pass deploy/validate (schemas with
//! unknown fields rejected, kustomize references, policy, and the rendered overlays when
//! kubectl is there), and the validator does fail on broken copies of them, saying why.
//!
//! They are also checked against the binaries themselves: the validator is given what
//! the worker serves (its probe and metrics paths and every series of its metrics
//! registry, [`facts`]), and hands back every command a container runs with the env its
//! ConfigMaps give it, which is parsed here by the binaries' own clap parsers
//! ([`parse_errors`]): a misspelt flag, an unknown `TABLEVAULT_*` setting or a value the
//! binary refuses fails the test as it would fail the pod.
//!
//! Needs Node.js; the validator's packages come from deploy/validate/package-lock.json
//! (`npm ci`, run by .ci/run, or here when they are missing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn validator_dir() -> PathBuf {
    repo().join("deploy/validate")
}

/// Whether the validator can run: node is there and its packages are installed (by
/// `npm ci` here if they are missing). `false` (with the reason printed) when node is
/// missing; an install failure panics.
fn validator_ready() -> bool {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| {
        if let Err(e) = Command::new("node").arg("--version").output() {
            return Err(format!("node could not be run ({e})"));
        }
        let dir = validator_dir();
        if !dir
            .join("node_modules/kubernetes-models/package.json")
            .exists()
            || !dir.join("node_modules/typescript/package.json").exists()
        {
            eprintln!(
                "installing the validator's packages (npm ci in {}) ...",
                dir.display()
            );
            let out = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("npm is needed to install deploy/validate: {e}"));
            assert!(
                out.status.success(),
                "npm ci in {} failed:\n{}",
                dir.display(),
                text(&out)
            );
        }
        Ok(())
    });
    match ready {
        Ok(()) => true,
        Err(why) => {
            eprintln!(
                "SKIPPED: deploy manifests not validated: {why}; install Node.js to run this test"
            );
            false
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn validate(dir: &Path, extra: &[&str]) -> Output {
    Command::new("node")
        .arg(validator_dir().join("validate.mjs"))
        .arg(dir)
        .arg(format!("--facts={}", facts().display()))
        .args(extra)
        .output()
        .expect("run node")
}

/// What the worker serves, as the validator's `--facts` file: its paths, and the sample
/// names of every metric in its registry (a counter's with `_total`, a histogram's
/// `_bucket`, `_sum` and `_count`).
fn facts() -> &'static Path {
    static FACTS: OnceLock<PathBuf> = OnceLock::new();
    FACTS.get_or_init(|| {
        use tablevault_worker::serve::{LIVENESS_PATH, METRICS_PATH, READINESS_PATH};
        let text = tablevault_worker::metrics::WorkerMetrics::new().render();
        let mut series = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if (words.next(), words.next()) != (Some("#"), Some("TYPE")) {
                continue;
            }
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            match kind {
                "counter" => series.push(format!("{name}_total")),
                "histogram" => {
                    series.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")))
                }
                _ => series.push(name.to_string()),
            }
        }
        assert!(
            series
                .iter()
                .any(|s| s == "tablevault_tasks_poisoned_total"),
            "{series:?}"
        );
        let facts = serde_json::json!({
            "paths": {
                "metrics": METRICS_PATH,
                "liveness": LIVENESS_PATH,
                "readiness": READINESS_PATH,
            },
            "metrics": series,
        });
        // Under target/, not the system's temporary directory: it outlives the test.
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "tablevault-deploy-facts-{}.json",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&path, facts.to_string()).unwrap();
        path
    })
}

/// Settings read from the environment outside the argument parsers.
const ENV_ONLY: [&str; 1] = [tablevault_azure::pipeline::http::CA_CERT_ENV];

/// Why the commands the validator wrote to `invocations` (JSON: `where`, `argv`, `env`)
/// would fail to start: each parsed by its binary's clap parser, with its `env` turned
/// into the flags that read them (an explicit flag wins, as with clap's own env).
fn parse_errors(invocations: &Path) -> Vec<String> {
    use clap::CommandFactory;
    let text = std::fs::read_to_string(invocations).unwrap();
    let list: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let mut errors = Vec::new();
    for inv in list {
        let at = inv["where"].as_str().unwrap_or("?");
        let argv: Vec<String> = inv["argv"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let env: Vec<(String, String)> = inv["env"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let binary = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a));
        let root = match binary {
            Some("tablevault-worker") => tablevault_worker::args::WorkerArgs::command(),
            Some("tablevault") => tablevault_cli::args::Cli::command(),
            other => {
                errors.push(format!(
                    "{at}: runs {other:?}, which is neither tablevault nor tablevault-worker"
                ));
                continue;
            }
        };
        // The subcommand's arguments, and the root's (global ones included).
        let sub = argv
            .iter()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .and_then(|name| root.find_subcommand(name).cloned());
        let scope: Vec<clap::Arg> = root
            .get_arguments()
            .chain(sub.iter().flat_map(|s| s.get_arguments()))
            .cloned()
            .collect();
        let known_anywhere = |name: &str| {
            std::iter::once(&root)
                .chain(root.get_subcommands())
                .flat_map(|c| c.get_arguments())
                .any(|a| a.get_env().is_some_and(|e| e == name))
        };
        let mut full = argv.clone();
        for (name, value) in &env {
            let arg = scope
                .iter()
                .find(|a| a.get_env().is_some_and(|e| e == name.as_str()));
            match arg {
                Some(arg) => {
                    let long = arg.get_long().expect("env options have a long name");
                    let flag = format!("--{long}");
                    let given = argv
                        .iter()
                        .any(|a| *a == flag || a.starts_with(&format!("{flag}=")));
                    if given {
                        continue;
                    }
                    if arg.get_action().takes_values() {
                        full.push(format!("{flag}={value}"));
                    } else if !matches!(value.as_str(), "" | "0" | "false") {
                        full.push(flag);
                    }
                }
                None if name.starts_with("TABLEVAULT_")
                    && !ENV_ONLY.contains(&name.as_str())
                    && !known_anywhere(name) =>
                {
                    errors.push(format!(
                        "{at}: {name} is no setting of {}",
                        binary.unwrap_or("?")
                    ));
                }
                None => {}
            }
        }
        if let Err(e) = root.try_get_matches_from(&full) {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default().to_string();
            errors.push(format!("{at}: `{}` fails: {first}", full.join(" ")));
        }
    }
    errors
}

/// The validator's run on `dir` with its invocations checked too: its output, and the
/// commands that would fail to start.
fn validate_and_parse(dir: &Path, extra: &[&str]) -> (Output, Vec<String>) {
    let invocations = std::env::temp_dir().join(format!(
        "tablevault-deploy-invocations-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let flag = format!("--invocations={}", invocations.display());
    let mut args = vec![flag.as_str()];
    args.extend_from_slice(extra);
    let out = validate(dir, &args);
    let errors = parse_errors(&invocations);
    let _ = std::fs::remove_file(&invocations);
    (out, errors)
}

#[test]
fn deploy_manifests_are_valid() {
    if !validator_ready() {
        return;
    }
    let (out, parse_errors) = validate_and_parse(&repo().join("deploy/kubernetes"), &[]);
    let text = text(&out);
    println!("{text}");
    assert!(out.status.success(), "deploy/validate failed:\n{text}");
    assert!(text.contains("deploy validation OK"), "{text}");
    assert!(
        text.contains("checked against the binaries' facts"),
        "{text}"
    );
    assert!(
        parse_errors.is_empty(),
        "commands the manifests run would not start:\n{}",
        parse_errors.join("\n")
    );
}

/// A copy of deploy/kubernetes in a fresh temporary directory.
struct Broken(PathBuf);

impl Broken {
    fn new(name: &str) -> Broken {
        let dst = std::env::temp_dir().join(format!(
            "tablevault-deploy-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        copy_dir(&repo().join("deploy/kubernetes"), &dst);
        Broken(dst)
    }

    /// Replaces `from` (which must be in the file) by `to` in one file of the copy.
    fn edit(&self, file: &str, from: &str, to: &str) -> &Self {
        let p = self.0.join(file);
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(
            s.contains(from),
            "{file} no longer contains {from:?}: update this test"
        );
        std::fs::write(&p, s.replacen(from, to, 1)).unwrap();
        self
    }

    /// Removes the line holding `key` and the more indented lines under it.
    fn remove_block(&self, file: &str, key: &str) -> &Self {
        let p = self.0.join(file);
        let s = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| {
                panic!("{file} has no line starting with {key:?}: update this test")
            });
        let indent = |l: &str| l.len() - l.trim_start().len();
        let depth = indent(lines[start]);
        let end = (start + 1..lines.len())
            .find(|&i| !lines[i].trim().is_empty() && indent(lines[i]) <= depth)
            .unwrap_or(lines.len());
        let mut kept: Vec<&str> = lines[..start].to_vec();
        kept.extend_from_slice(&lines[end..]);
        std::fs::write(&p, kept.join("\n") + "\n").unwrap();
        self
    }

    fn write(&self, file: &str, contents: &str) -> &Self {
        std::fs::write(self.0.join(file), contents).unwrap();
        self
    }

    /// Runs the validator on the copy (without rendering: every breakage here is found
    /// in the sources), asserts it fails, and returns its output.
    fn fails(&self) -> String {
        let out = validate(&self.0, &["--no-render"]);
        let text = text(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "the validator accepted a broken copy:\n{text}"
        );
        assert!(text.contains("deploy validation FAILED"), "{text}");
        text
    }
}

impl Drop for Broken {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

fn assert_says(text: &str, wanted: &[&str]) {
    for w in wanted {
        assert!(
            text.contains(w),
            "expected {w:?} in the validator's output:\n{text}"
        );
    }
}

#[test]
fn validator_rejects_broken_manifests() {
    if !validator_ready() {
        return;
    }

    // A misspelled field, deep in a pod template: the schema check names it, and policy
    // notices the setting it was meant to be is missing.
    let text = Broken::new("typo")
        .edit(
            "base/deployment.yaml",
            "readOnlyRootFilesystem: true",
            "readOnlyRootFileSystem: true",
        )
        .fails();
    assert_says(
        &text,
        &[
            "base/deployment.yaml",
            "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem: unknown field `readOnlyRootFileSystem`",
            "securityContext.readOnlyRootFilesystem must be true",
        ],
    );

    // A misspelled field in a CRD (KEDA) and a wrong type in a core field.
    let text = Broken::new("crd")
        .edit("base/keda.yaml", "minReplicaCount: 0", "minReplicaCnt: 0")
        .edit(
            "base/deployment.yaml",
            "initialDelaySeconds: 5",
            "initialDelaySeconds: five",
        )
        .fails();
    assert_says(
        &text,
        &[
            "(ScaledObject/tablevault-worker): spec.minReplicaCnt: unknown field `minReplicaCnt`",
            "livenessProbe.initialDelaySeconds: must be integer",
        ],
    );

    // A worker without resources, a pool without probes, a pod without its identity.
    let text = Broken::new("policy")
        .remove_block("base/deployment.yaml", "resources:")
        .remove_block("base/deployment.yaml", "readinessProbe:")
        .edit(
            "overlays/scheduled-backup/cronjob.yaml",
            "azure.workload.identity/use: \"true\"",
            "azure.workload.identity/use: \"false\"",
        )
        .fails();
    assert_says(
        &text,
        &[
            "containers[0].resources.requests.cpu is required",
            "containers[0].resources.limits.memory is required",
            "containers[0].readinessProbe is required",
            "(CronJob/tablevault-nightly-backup): spec.jobTemplate.spec.template.metadata.labels: azure.workload.identity/use: \"true\" is required",
        ],
    );

    // Keys in a Secret, an unknown kind, a kustomization naming a missing file.
    let text = Broken::new("secret")
        .write(
            "base/secret.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tablevault\nstringData:\n  backup: \"DefaultEndpointsProtocol=https;AccountName=a;AccountKey=b\"\n---\napiVersion: apps/v1\nkind: Deploymnet\nmetadata:\n  name: x\n",
        )
        .edit(
            "base/kustomization.yaml",
            "  - keda.yaml\n",
            "  - keda.yaml\n  - secret.yaml\n  - hpa.yaml\n",
        )
        .fails();
    assert_says(
        &text,
        &[
            "Secret key `backup` holds a storage account key",
            "unknown kind Deploymnet in apps/v1",
            "resources: hpa.yaml does not exist",
        ],
    );

    // Pools that share an identity and a queue, and a nightly backup on no pool's queue.
    let text = Broken::new("pools")
        .edit(
            "overlays/restore-pool/serviceaccount.yaml",
            "22222222-2222-2222-2222-222222222222",
            "11111111-1111-1111-1111-111111111111",
        )
        .edit(
            "overlays/restore-pool/pool.env",
            "TABLEVAULT_QUEUE=tablevault-restore",
            "TABLEVAULT_QUEUE=tablevault-backup",
        )
        .edit(
            "overlays/scheduled-backup/coordinator.env",
            "TABLEVAULT_QUEUE=tablevault-backup",
            "TABLEVAULT_QUEUE=tablevault-tasks",
        )
        .fails();
    assert_says(
        &text,
        &[
            "the backup and restore pools share the managed identity",
            "the backup and restore pools share the queue tablevault-backup",
            "the nightly backup enqueues on tablevault-tasks",
        ],
    );
}

/// Breakages the schemas cannot see, found against what the worker serves: its port,
/// probe paths, the PodMonitor's port and path, the series an alert names, and accounts
/// that must agree across overlays.
#[test]
fn validator_checks_manifests_against_the_binaries() {
    if !validator_ready() {
        return;
    }
    let text = Broken::new("ports")
        .edit(
            "base/kustomization.yaml",
            "TABLEVAULT_METRICS_ADDR=0.0.0.0:9464",
            "TABLEVAULT_METRICS_ADDR=0.0.0.0:9465",
        )
        .edit("base/deployment.yaml", "path: /readyz", "path: /ready")
        .fails();
    assert_says(
        &text,
        &[
            "the worker serves on port 9465 (0.0.0.0:9465), which is no containerPort (9464)",
            "readinessProbe asks port metrics (9464), but the worker serves on 9465",
            "readinessProbe asks /ready, but the worker serves it on /readyz",
        ],
    );

    let text = Broken::new("scrape")
        .edit(
            "overlays/monitoring/podmonitor.yaml",
            "path: /metrics",
            "path: /metric",
        )
        .edit(
            "overlays/monitoring/podmonitor.yaml",
            "- port: metrics",
            "- port: http-metrics",
        )
        .edit(
            "overlays/monitoring/prometheusrule.yaml",
            "increase(tablevault_tasks_poisoned_total[30m])",
            "increase(tablevault_task_poisoned_total[30m])",
        )
        .fails();
    assert_says(
        &text,
        &[
            "podMetricsEndpoints[0].path /metric: the worker serves metrics on /metrics",
            "podMetricsEndpoints[0].port http-metrics is no port of",
            "TablevaultTaskPoisoned: tablevault_task_poisoned_total is no series the worker serves",
        ],
    );

    let text = Broken::new("unscraped")
        .edit(
            "overlays/monitoring/podmonitor.yaml",
            "app.kubernetes.io/name: tablevault-worker",
            "app.kubernetes.io/name: tablevault-workers",
        )
        .remove_block("base/kustomization.yaml", "- TABLEVAULT_METRICS_ADDR")
        .fails();
    assert_says(
        &text,
        &[
            "selects no worker pod",
            "no metrics address (TABLEVAULT_METRICS_ADDR or --metrics-addr)",
        ],
    );

    let text = Broken::new("accounts")
        .edit(
            "overlays/backup-pool/kustomization.yaml",
            "value: CHANGEMEbackup",
            "value: CHANGEMEbackup2",
        )
        .edit(
            "overlays/scheduled-backup/coordinator.env",
            "TABLEVAULT_SOURCE=https://CHANGEMEsource.table.core.windows.net",
            "TABLEVAULT_SOURCE=https://CHANGEMEother.table.core.windows.net",
        )
        .fails();
    assert_says(
        &text,
        &[
            "KEDA watches the queue in account CHANGEMEbackup2, but the workers' queue is in CHANGEMEbackup",
            "TABLEVAULT_SOURCE is https://CHANGEMEother.table.core.windows.net, but the backup pool's is https://CHANGEMEsource.table.core.windows.net",
        ],
    );
}

/// Commands the schemas accept but the binaries would refuse: each found by parsing the
/// command a container runs, with its env, with the binary's own parser.
#[test]
fn commands_the_binaries_refuse_are_found() {
    if !validator_ready() {
        return;
    }
    let cases: [(&str, &str, &str, &str, &[&str]); 5] = [
        (
            "flag",
            "overlays/scheduled-backup/cronjob.yaml",
            r#"args: ["backup", "--workers", "0""#,
            r#"args: ["backup", "--worker", "0""#,
            &[
                "CronJob/tablevault-nightly-backup container backup",
                "unexpected argument '--worker'",
            ],
        ),
        (
            "binary",
            "base/deployment.yaml",
            r#"command: ["tablevault-worker"]"#,
            r#"command: ["tablevault-workers"]"#,
            &["runs Some(\"tablevault-workers\"), which is neither"],
        ),
        (
            "identity",
            "base/kustomization.yaml",
            "TABLEVAULT_IDENTITY=workload",
            "TABLEVAULT_IDENTITY=wrkload",
            &["container worker", "--identity=wrkload", "fails"],
        ),
        (
            "setting",
            "overlays/scheduled-backup/coordinator.env",
            "TABLEVAULT_STALL_TIMEOUT=1200",
            "TABLEVAULT_STALL_TIMEOT=1200",
            &["TABLEVAULT_STALL_TIMEOT is no setting of tablevault"],
        ),
        (
            "value",
            "base/deployment.yaml",
            "--concurrency=4",
            "--concurrency=0",
            &["container worker", "--concurrency", "fails"],
        ),
    ];
    for (name, file, from, to, wanted) in cases {
        let broken = Broken::new(name);
        broken.edit(file, from, to);
        let (out, errors) = validate_and_parse(&broken.0, &["--no-render"]);
        let all = format!("{}\n{}", text(&out), errors.join("\n"));
        assert!(!errors.is_empty(), "{name}: nothing refused:\n{all}");
        assert_says(&errors.join("\n"), wanted);
    }
}
