//! The Kubernetes manifests under deploy/kubernetes pass deploy/validate (schemas with
//! unknown fields rejected, kustomize references, policy, and the rendered overlays when
//! kubectl is there), and the validator does fail on broken copies of them, saying why.
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
        .args(extra)
        .output()
        .expect("run node")
}

#[test]
fn deploy_manifests_are_valid() {
    if !validator_ready() {
        return;
    }
    let out = validate(&repo().join("deploy/kubernetes"), &[]);
    let text = text(&out);
    println!("{text}");
    assert!(out.status.success(), "deploy/validate failed:\n{text}");
    assert!(text.contains("deploy validation OK"), "{text}");
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
